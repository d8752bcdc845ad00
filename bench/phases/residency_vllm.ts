/**
 * The residency phase, launcher-woken half (issue 54 item 6,
 * `deno task bench --only=residency-vllm`): the launcher CLI over three vLLM
 * stand-in cards (tests/fixtures/vllm_stand_in.ts, built from vLLM's source)
 * whose awake footprints are 1.25× the one GPU of a stand-in machine
 * (tests/support/fake_gpus.ts): three of 10 GiB on 24 GiB, each with
 * `sleep_after`. At most two fit awake, so a request to the third parks in
 * its `/load` until the launcher has put an idle one to sleep and woken it.
 *
 * First the awake baseline (one awake engine, streamed and plain requests one
 * after another), then two rounds of alternating requests (`a b c a b c …`
 * from the sleeper, every other one streamed): `ONE_CLIENT_REQUESTS` from one
 * client (each finds its engine asleep and another idle), then the
 * benchmark's `REQUESTS` from `CLIENTS` clients at once, each taking the next
 * request when its last one ends: one client's stream is in flight while the
 * other's request wakes its engine. Each request is sent straight to its
 * engine's port, as a client does (the launcher has no inference endpoint);
 * before it, an untimed `GET /is_sleeping` says whether it will park.
 *
 * What it keeps for the rows: each request's first token (a plain request's
 * whole answer), the launcher's journal (its `state`, `switch`, `woken`,
 * `made-room`, `wake-waits` and `wake-failed` lines), every stand-in
 * `nvidia-smi` run's start and end (a wrapper on PATH times it), the device's
 * use from the stand-in's ledger every 20 ms, the engines' out-of-memory lines
 * and the launcher's `sleep` views at the end.
 *
 * @module
 */
import { fakeDevices, fakeGpuMachine } from "../../tests/support/fake_gpus.ts";
import { vllmStandIn } from "../../tests/support/vllm_stand_in.ts";
import {
  freePorts,
  pathWith,
  readJournal,
} from "../../tests/support/helpers.ts";
import {
  type ChatOptions,
  type FirstToken,
  firstToken,
} from "../load/first_token.ts";
import {
  type EngineDetailView,
  makeRootIn,
  spawnLauncher,
  stopCleanly,
} from "../servers/spawn.ts";
import {
  type Bench,
  HOST,
  POLL_TIMEOUT_MS,
  progress,
  sleep,
  url,
} from "../plan.ts";

export const CARDS = ["a", "b", "c"] as const;
/** One stand-in GPU. */
export const DEVICE_MIB = 24576;
/** Each card's awake footprint: three are 1.25× the device. */
export const AWAKE_MIB = 10240;
/** What each keeps asleep (level 1 keeps the CUDA context). */
export const RESIDUE_MIB = 1024;
/** The stand-in's own wake (`--fake-wake-ms`): about an H100's level-1 wake of a small model. */
export const WAKE_MS = 300;
/** The stand-in's own sleep (`--fake-sleep-ms`). */
export const SLEEP_MS = 100;
export const LOAD_MS = 300;
/** `--fake-tokens` × `--fake-token-ms`: a request generates for 400 ms. */
export const TOKENS = 8;
export const TOKEN_MS = 50;
/** Long enough that engines sleep only to make room during the round. */
export const SLEEP_AFTER_S = 60;
export const REQUESTS = 100;
export const CLIENTS = 2;
/** One client first: each request finds its engine asleep and another idle. */
export const ONE_CLIENT_REQUESTS = 30;
const ROUNDS = [[1, ONE_CLIENT_REQUESTS], [CLIENTS, REQUESTS]] as const;
/** Awake baseline: this many streamed and as many plain requests. */
export const AWAKE_SAMPLES = 10;
const LEDGER_MS = 20;

const NVIDIA_SMI =
  new URL("../../tests/fixtures/nvidia_smi.ts", import.meta.url).pathname;

/** One request of the alternating round. */
export interface SwitchRequest {
  index: number;
  model: string;
  stream: boolean;
  client: number;
  /** `GET /is_sleeping` just before it was sent; null when unread. */
  asleep: boolean | null;
  /** Wall-clock ms (`Date.now()`) at its send. */
  sentAt: number;
  got: FirstToken;
}

/** A launcher journal line (`logs/events.jsonl`). */
export interface JournalLine {
  at: string;
  model: string | null;
  event: string;
  reason?: string;
  detail?: string;
  from?: string;
  to?: string;
}

/** One stand-in `nvidia-smi` run, wall-clock ms. */
export interface SmiRun {
  start: number;
  end: number;
  code: number;
}

/** One round of alternating requests. */
export interface SwitchRound {
  clients: number;
  requests: SwitchRequest[];
  /** Wall-clock ms: its first send and its last answer. */
  from: number;
  to: number;
}

export interface VllmResidencyResults {
  awake: { stream: FirstToken[]; plain: FirstToken[] };
  /** The card the awake baseline was sent to. */
  awakeCard: string;
  /** One client, then `CLIENTS`. */
  rounds: SwitchRound[];
  journal: JournalLine[];
  smi: SmiRun[];
  ledger: { samples: number; peakMib: number; overTotal: number };
  /** `CUDA Error: out of memory` lines in the engines' logs. */
  oomLines: number;
  /** Each card's `sleep` view at the end. */
  views: Record<string, NonNullable<EngineDetailView["sleep"]>>;
  /** From the launcher's spawn to all three loaded, one asleep, s. */
  startSeconds: number;
  seconds: number;
  load: [number, number];
}

function catalogueText(): string {
  const args = [
    `fake-awake-mib: ${AWAKE_MIB}`,
    `fake-residue-mib: ${RESIDUE_MIB}`,
    `fake-load-ms: ${LOAD_MS}`,
    `fake-wake-ms: ${WAKE_MS}`,
    `fake-sleep-ms: ${SLEEP_MS}`,
    `fake-tokens: ${TOKENS}`,
    `fake-token-ms: ${TOKEN_MS}`,
  ].join(", ");
  const lines = ["models:"];
  for (const name of CARDS) {
    lines.push(
      `  ${name}: { verb: chat, hub: org/${name}, engine: vllm, gpu_memory: ${
        AWAKE_MIB / 1024
      }GiB, sleep_after: ${SLEEP_AFTER_S}, args: { ${args} } }`,
    );
  }
  return `${lines.join("\n")}\n`;
}

/** A PATH folder whose `nvidia-smi` runs the stand-in and logs each run's start, end and code. */
async function timedNvidiaSmi(work: string): Promise<[string, string]> {
  const dir = `${work}/smi-bin`;
  await Deno.mkdir(dir, { recursive: true });
  const log = `${work}/smi-runs`;
  await Deno.writeTextFile(
    `${dir}/nvidia-smi`,
    `#!/bin/sh\ns=$(date +%s%N)\n'${Deno.execPath()}' run -A --quiet '${NVIDIA_SMI}' "$@"\nrc=$?\necho "$s $(date +%s%N) $rc" >> '${log}'\nexit $rc\n`,
    { mode: 0o755 },
  );
  return [dir, log];
}

async function smiRuns(log: string): Promise<SmiRun[]> {
  const text = await Deno.readTextFile(log).catch(() => "");
  return text.split("\n").filter(Boolean).map((line) => {
    const [s, e, rc] = line.split(" ");
    return { start: Number(s) / 1e6, end: Number(e) / 1e6, code: Number(rc) };
  });
}

/** One card of `GET /models?detail=1`: its detail and the URL clients use. */
type View = EngineDetailView & { url?: string };

/** Every card of `GET /models?detail=1`. */
async function views(
  bench: Bench,
  port: number,
): Promise<Record<string, View>> {
  const response = await fetch(url(port, "/models?detail=1"), {
    client: bench.client,
    signal: AbortSignal.timeout(POLL_TIMEOUT_MS + 3_000),
  });
  if (!response.ok) {
    await response.body?.cancel();
    throw new Error(`GET /models?detail=1 answered ${response.status}`);
  }
  const body = await response.json() as {
    active?: Record<string, View>;
  };
  return body.active ?? {};
}

/** The device's use by the ledger (live engines' entries), MiB. */
async function deviceUsed(ledger: string): Promise<number> {
  let used = 0;
  for await (const entry of Deno.readDir(`${ledger}/procs`)) {
    if (!entry.name.endsWith(".json")) continue;
    try {
      const proc = JSON.parse(
        await Deno.readTextFile(`${ledger}/procs/${entry.name}`),
      ) as { mib: number; goneAt?: number };
      if (proc.goneAt === undefined) used += proc.mib;
    } catch {
      // Being rewritten, or gone.
    }
  }
  return used;
}

/** Samples the ledger every 20 ms until `stop` aborts. */
async function watchLedger(
  ledger: string,
  stop: AbortSignal,
): Promise<VllmResidencyResults["ledger"]> {
  const out = { samples: 0, peakMib: 0, overTotal: 0 };
  while (!stop.aborted) {
    const used = await deviceUsed(ledger).catch(() => undefined);
    if (used !== undefined) {
      out.samples++;
      out.peakMib = Math.max(out.peakMib, used);
      if (used > DEVICE_MIB) out.overTotal++;
    }
    await sleep(LEDGER_MS);
  }
  return out;
}

async function isSleeping(bench: Bench, port: number): Promise<boolean | null> {
  try {
    const response = await fetch(`http://${HOST}:${port}/is_sleeping`, {
      client: bench.client,
      signal: AbortSignal.timeout(POLL_TIMEOUT_MS),
    });
    const body = await response.json() as { is_sleeping?: unknown };
    return typeof body.is_sleeping === "boolean" ? body.is_sleeping : null;
  } catch {
    return null;
  }
}

async function oomLines(root: string): Promise<number> {
  let count = 0;
  for (const name of CARDS) {
    const text = await Deno.readTextFile(`${root}/logs/${name}.log`)
      .catch(() => "");
    count += text.match(/CUDA Error: out of memory/g)?.length ?? 0;
  }
  return count;
}

/** Polls the views every 100 ms until `test` holds. */
async function until(
  bench: Bench,
  port: number,
  test: (v: Record<string, View>) => boolean,
  what: string,
  ms: number,
): Promise<Record<string, View>> {
  const deadline = performance.now() + ms;
  let last: Record<string, View> = {};
  while (performance.now() < deadline && !bench.signal.aborted) {
    last = await views(bench, port).catch(() => last);
    if (test(last)) return last;
    await sleep(100);
  }
  const states = CARDS.map((n) => `${n} ${last[n]?.state}`).join(", ");
  throw new Error(
    `Cannot measure the vLLM residency: ${what} not seen within ${ms} ms (${states})`,
  );
}

/** The awake baseline, then the alternating round. */
export async function residencyVllmPhase(
  bench: Bench,
): Promise<VllmResidencyResults> {
  const began = performance.now();
  const loadBefore = Deno.loadavg()[0] ?? Number.NaN;
  await using stack = new AsyncDisposableStack();
  const vllm = stack.use(await vllmStandIn());
  const machine = stack.use(
    await fakeGpuMachine({ devices: fakeDevices(1, DEVICE_MIB) }, bench.work),
  );
  const [smiBin, smiLog] = await timedNvidiaSmi(bench.work);
  const root = await makeRootIn(bench.work);
  const catalogue = `${bench.work}/residency_vllm.yaml`;
  await Deno.writeTextFile(catalogue, catalogueText());
  progress(
    `residency-vllm: three ${AWAKE_MIB / 1024} GiB vLLM stand-in cards on one ${
      DEVICE_MIB / 1024
    } GiB stand-in GPU; ${ONE_CLIENT_REQUESTS} alternating requests from one client, then ${REQUESTS} from ${CLIENTS}`,
  );
  const port = freePorts(1 + CARDS.length);
  const launcher = await spawnLauncher(bench, stack, CARDS, port, {
    root,
    catalogue,
    path: pathWith(`${smiBin}:${vllm.dir}`),
    // No engine key: the released builds' dev routes answer without it, and
    // the probe then runs the card without launcher-driven sleep.
    env: { FAKE_GPU_LEDGER: machine.ledger, LOCAL_ENGINE_API_KEY: "" },
    args: ["--gpus", "0"],
    label: "vLLM stand-in, launcher-woken",
  });
  const loaded = await until(
    bench,
    port,
    (v) => {
      const states = CARDS.map((n) => v[n]?.state);
      return states.every((s) => s === "ready" || s === "sleeping") &&
        states.includes("sleeping");
    },
    "all three loaded, one asleep",
    90_000,
  ).catch((error) => {
    throw new Error(`${error.message}\n${launcher.tail()}`);
  });
  const startSeconds = (performance.now() - launcher.spawnedAt) / 1000;
  // The engine's own port, from its `url` (`http://127.0.0.1:PORT/v1`).
  const portOf = (name: string) => Number(new URL(loaded[name]!.url!).port);
  const awakeCard = CARDS.find((n) => loaded[n]!.state === "ready")!;
  progress(
    `residency-vllm: loaded in ${startSeconds.toFixed(1)} s (${
      CARDS.map((n) => `${n} ${loaded[n]!.state}`).join(", ")
    }); awake baseline on ${awakeCard}`,
  );

  const chat = (stream: boolean): ChatOptions => ({
    client: bench.client,
    maxTokens: TOKENS,
    stream,
    timeoutMs: 60_000,
  });
  const awake = { stream: [] as FirstToken[], plain: [] as FirstToken[] };
  for (let i = 0; i < 2 * AWAKE_SAMPLES; i++) {
    const stream = i % 2 === 0;
    const got = await firstToken(portOf(awakeCard), chat(stream));
    (stream ? awake.stream : awake.plain).push(got);
  }

  const stopLedger = new AbortController();
  const ledgerWatch = watchLedger(machine.ledger, stopLedger.signal);
  const rounds: SwitchRound[] = [];
  for (const [clients, count] of ROUNDS) {
    // Each round starts at the sleeper, once no wake is under way.
    const settled = await until(
      bench,
      port,
      (v) =>
        CARDS.every((n) => ["ready", "sleeping"].includes(v[n]?.state ?? "")),
      "no wake under way",
      30_000,
    );
    const sleeper = CARDS.findIndex((n) => settled[n]!.state === "sleeping");
    const order = CARDS.map((_, i) =>
      CARDS[(Math.max(sleeper, 0) + i) % CARDS.length]!
    );
    progress(
      `residency-vllm: ${count} requests from ${clients} client(s), ${
        order.join(" ")
      } …`,
    );
    rounds.push(await round(bench, clients, count, order, portOf, chat));
  }
  await sleep(500); // the last journal lines
  stopLedger.abort();
  const ledger = await ledgerWatch;
  const end = await views(bench, port);
  const journal = (await readJournal<JournalLine>(root)).filter((e) =>
    e.model !== null && (CARDS as readonly string[]).includes(e.model) &&
    (e.event === "sleep" || e.event === "state")
  );
  await stopCleanly([launcher]);
  return {
    awake,
    awakeCard,
    rounds,
    journal,
    smi: await smiRuns(smiLog),
    ledger,
    oomLines: await oomLines(root),
    views: Object.fromEntries(CARDS.map((n) => [n, end[n]!.sleep!])),
    startSeconds,
    seconds: (performance.now() - began) / 1000,
    load: [loadBefore, Deno.loadavg()[0] ?? Number.NaN],
  };
}

/**
 * `count` requests in `order`, over and over, every other one streamed, from
 * `clients` clients at once: each takes the next request when its last one
 * has ended.
 */
async function round(
  bench: Bench,
  clients: number,
  count: number,
  order: readonly string[],
  portOf: (name: string) => number,
  chat: (stream: boolean) => ChatOptions,
): Promise<SwitchRound> {
  const requests: SwitchRequest[] = [];
  let next = 0;
  const from = Date.now();
  const client = async (id: number) => {
    for (let i = next++; i < count && !bench.signal.aborted; i = next++) {
      const model = order[i % order.length]!;
      const stream = i % 2 === 0;
      const asleep = await isSleeping(bench, portOf(model));
      const sentAt = Date.now();
      const got = await firstToken(portOf(model), chat(stream));
      requests.push({
        index: i,
        model,
        stream,
        client: id,
        asleep,
        sentAt,
        got,
      });
    }
  };
  await Promise.all(Array.from({ length: clients }, (_, id) => client(id)));
  requests.sort((a, b) => a.index - b.index);
  return { clients, requests, from, to: Date.now() };
}
