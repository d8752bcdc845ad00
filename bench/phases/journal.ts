/**
 * The journal phase (issue 29): what the journal costs supervision. One
 * engine run in this process runs a restart storm: a command card
 * whose engine (`sh -c 'exit 3'`) exits at once, restarted after 1 ms
 * (`restartMaxDelayMs: 1`), every state change journaled to
 * `logs/events.jsonl` or not at all. Rounds alternate the two ways; each
 * times `PLAN.journalRestarts` restarts.
 *
 * @module
 */
import { Registry } from "../../src/catalogue.ts";
import { planEngine } from "../../src/engines/engine_plan.ts";
import { EngineLog } from "../../src/engines/log_sink.ts";
import { Journal } from "../../src/supervision/journal.ts";
import { EngineRecords } from "../../src/supervision/records.ts";
import { EngineRun } from "../../src/supervision/engine_run.ts";
import { configureLogging } from "../../src/common/log.ts";
import { type Bench, PLAN, progress, removeDir, rotated } from "../plan.ts";
import { makeRootIn } from "../servers/spawn.ts";

/** Milliseconds per storm of `PLAN.journalRestarts` restarts, each way, index i in the same round. */
export interface JournalResults {
  with: number[];
  without: number[];
  /** Journal lines found after the storms with it (every transition). */
  lines: number;
  /** Journal lines expected: per storm, backoff and starting per restart, then stopping and exited. */
  expected: number;
}

const CARD = `models:
  storm:
    verb: chat
    engine: command
    hub: org/storm
    command: [sh, -c, "exit 3"]
`;

/** One storm; resolves after `restarts` restarts, with its wall time. */
async function storm(
  root: string,
  journal: Journal | undefined,
): Promise<number> {
  const card = Registry.parse(CARD).get("storm");
  const plan = planEngine(card, {
    host: "127.0.0.1",
    port: 1,
    directory: root,
    apiKey: "",
    baseEnv: Deno.env.toObject(),
    defaults: {
      restart: "always",
      failedRetryMs: 0,
      drainTimeoutMs: 0,
      stallTimeoutMs: 0,
      canaryIntervalMs: 0,
    },
  });
  let done: () => void = () => {};
  const finished = new Promise<void>((resolve) => done = resolve);
  const log = new EngineLog(plan.logFile);
  const run: EngineRun = new EngineRun(plan, {
    log,
    restartMaxDelayMs: 1,
    stableAfterMs: 60_000,
    livenessFailures: 0,
    graceMs: 1_000,
    records: new EngineRecords(root),
    startTimeoutMs: 0,
    journal,
    onChange() {
      if ((run?.detail().restarts ?? 0) >= PLAN.journalRestarts) done();
    },
  });
  const began = performance.now();
  run.start();
  await finished;
  const ms = performance.now() - began;
  await run.stop();
  return ms;
}

/** Alternating storms with and without the journal. */
export async function journalPhase(bench: Bench): Promise<JournalResults> {
  const out: JournalResults = { with: [], without: [], lines: 0, expected: 0 };
  const root = await makeRootIn(bench.work);
  // Each restart logs two lines: quiet, they cost the same both ways.
  const previous = configureLogging({ level: "error" });
  try {
    for (let round = 0; round < PLAN.journalRounds; round++) {
      for (const way of rotated(["with", "without"] as const, round)) {
        progress(`journal: round ${round + 1}, ${way} the journal`);
        if (way === "without") {
          out.without.push(await storm(root, undefined));
          continue;
        }
        const journal = new Journal(`${root}/logs/events.jsonl`, {
          maxBytes: 0,
        });
        out.with.push(await storm(root, journal));
        await journal.close();
      }
    }
    const text = await Deno.readTextFile(`${root}/logs/events.jsonl`);
    out.lines = text.trim().split("\n").length;
    out.expected = PLAN.journalRounds * (PLAN.journalRestarts * 2 + 2);
  } finally {
    configureLogging(previous);
    await removeDir(root);
  }
  return out;
}
