/**
 * The serving phase (issue 36, `deno task bench --only=serving`): does
 * reading every engine's metrics each health round slow `GET /models` or
 * `GET /health`, and what does a round cost the launcher? This tree against
 * the tree before it ({@linkcode BEFORE_SERVING}) and itself (the A/A
 * control), order rotated, at 8 and 32 stand-in engines that serve vLLM's
 * real `/metrics` text padded to vLLM's ~100 KB (`--fake-metrics vllm`), `--health-interval 1` (ten
 * times the default's rounds, so reads weigh more than they would). Then the
 * time from a wedge to `stalled`, measured with short values, this tree only.
 *
 * @module
 */
import { exportTree } from "../servers/before_tree.ts";
import { makeRootIn, spawnLauncher, waitHealthy } from "../servers/spawn.ts";
import { pathWithoutNvidiaSmi } from "./tree_compare.ts";
import { freePorts, readJournal } from "../../tests/support/helpers.ts";
import {
  type Bench,
  engineNames,
  median,
  progress,
  removeDir,
  rotated,
  sleep,
  url,
} from "../plan.ts";

/** main before issue 36's wiring (issue 37 merged). */
export const BEFORE_SERVING = "59beeb8";
const MOD = new URL("../../mod.ts", import.meta.url).pathname;
const CONFIG = new URL("../../deno.json", import.meta.url).pathname;
export const SERVING_SIZES = [8, 32] as const;
export const SERVING_ROUNDS = 3;
export const SERVING_MODELS_ASKS = 20;
export const SERVING_HEALTH_ASKS = 200;
/** Idle seconds over which the launcher's CPU is read. */
export const SERVING_CPU_WINDOW_S = 6;
export const SERVING_INTERVAL_S = 1;

export interface ServingSample {
  /** Median `GET /models` (polls every engine), ms. */
  models: number;
  /** Median `GET /health`, ms. */
  health: number;
  /** Launcher CPU (user + system) per second idle, ms: about one round's cost. */
  cpuPerRound: number;
}

export type ServingArm = "now" | "before" | "again";

export interface ServingResults {
  commit: string;
  samples: Record<number, Record<ServingArm, ServingSample[]>>;
  /** Wedge → `stalled` (journal time), ms, short values. */
  stallMs: number;
  canaryMs: number;
}

function servingCatalogue(names: readonly string[]): string {
  return `models:\n${
    names.map((n) =>
      `  ${n}: { verb: chat, hub: org/${n}, args: { fake-metrics: vllm, fake-metrics-pad-kb: 100 } }`
    ).join("\n")
  }\n`;
}

async function timed(
  bench: Bench,
  port: number,
  path: string,
  asks: number,
): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < asks; i++) {
    const began = performance.now();
    const response = await fetch(url(port, path), { client: bench.client });
    await response.arrayBuffer();
    if (!response.ok) {
      throw new Error(`GET ${path} answered ${response.status}`);
    }
    times.push(performance.now() - began);
  }
  return median(times);
}

async function sample(
  bench: Bench,
  mod: string,
  n: number,
  label: string,
): Promise<ServingSample> {
  await using stack = new AsyncDisposableStack();
  const names = engineNames(n);
  const port = freePorts(n + 1);
  const root = await makeRootIn(bench.work);
  const catalogue = `${root}/serving.yaml`;
  await Deno.writeTextFile(catalogue, servingCatalogue(names));
  const child = await spawnLauncher(bench, stack, names, port, {
    mod,
    config: CONFIG,
    root,
    catalogue,
    path: `${bench.bin}:${pathWithoutNvidiaSmi()}`,
    args: ["--gpus", "none", "--health-interval", String(SERVING_INTERVAL_S)],
    label,
  });
  await child.waitForLine(/listening on /);
  await waitHealthy(bench, child, port, names, 60_000, 100);
  await sleep(2 * SERVING_INTERVAL_S * 1000); // rounds with traffic reads under way
  const cpuBefore = child.cpuSeconds();
  await sleep(SERVING_CPU_WINDOW_S * 1000);
  const cpuPerRound = (child.cpuSeconds() - cpuBefore) * 1000 /
    SERVING_CPU_WINDOW_S;
  const models = await timed(bench, port, "/models", SERVING_MODELS_ASKS);
  const health = await timed(bench, port, "/health", SERVING_HEALTH_ASKS);
  await child.stop("SIGTERM");
  return { models, health, cpuPerRound };
}

/** ms from the stand-in's wedge to the journal's `→ stopping` (stalled). */
async function wedgeToStalled(bench: Bench, canary: boolean): Promise<number> {
  await using stack = new AsyncDisposableStack();
  const port = freePorts(2);
  const root = await makeRootIn(bench.work);
  const catalogue = `${root}/wedge.yaml`;
  const wedgeAfter = 4_000;
  const args = canary
    ? `fake-metrics: vllm, fake-wedge-after-ms: ${wedgeAfter}, fake-wedge-gauge: zero`
    : `fake-metrics: vllm, fake-tokens: 100000, fake-token-ms: 20, fake-wedge-after-ms: ${wedgeAfter}`;
  await Deno.writeTextFile(
    catalogue,
    `models:\n  w: { verb: chat, hub: org/w, args: { ${args} } }\n`,
  );
  const records = await Deno.makeTempDir({ dir: bench.work });
  const child = await spawnLauncher(bench, stack, ["w"], port, {
    root,
    catalogue,
    path: `${bench.bin}:${pathWithoutNvidiaSmi()}`,
    env: { FAKE_ENGINE_RECORD_DIR: records },
    args: [
      "--gpus",
      "none",
      "--health-interval",
      "0.5",
      "--stall-timeout",
      "2",
      "--canary-interval",
      canary ? "2" : "0",
      "--canary-timeout",
      "1",
    ],
    label: canary ? "wedge, canary" : "wedge, under load",
  });
  await waitHealthy(bench, child, port, ["w"], 60_000, 100);
  const abort = new AbortController();
  if (!canary) {
    for (let i = 0; i < 2; i++) {
      fetch(url(port + 1, "/v1/chat/completions"), {
        method: "POST",
        signal: abort.signal,
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ messages: [{ role: "user", content: "hi" }] }),
      }).then((r) => r.text()).catch(() => "");
    }
  }
  const record = JSON.parse(
    await Deno.readTextFile(`${records}/${port + 1}.json`),
  );
  const wedgedAt = record.startedAt + wedgeAfter;
  let stalledAt: number | undefined;
  const deadline = Date.now() + 60_000;
  while (stalledAt === undefined && Date.now() < deadline) {
    await sleep(100);
    const events = await readJournal<
      { at: string; to?: string; reason?: string }
    >(root);
    for (const e of events) {
      if (e.to === "stopping" && e.reason === "stalled") {
        stalledAt = Date.parse(e.at);
      }
    }
  }
  abort.abort();
  await child.stop("SIGTERM");
  if (stalledAt === undefined) throw new Error("no stall in 60 s");
  return stalledAt - wedgedAt;
}

export async function servingPhase(bench: Bench): Promise<ServingResults> {
  const dir = `${bench.work}/before-${BEFORE_SERVING}`;
  try {
    const tree = await exportTree(BEFORE_SERVING, dir);
    if ("skipped" in tree) throw new Error(tree.skipped);
    const arms: [ServingArm, string][] = [
      ["now", MOD],
      ["before", tree.mod],
      ["again", MOD],
    ];
    progress(`serving: warm-up starts of this tree and ${tree.commit}`);
    for (const [, mod] of arms.slice(0, 2)) {
      await sample(bench, mod, 8, "warm-up");
    }
    const samples: ServingResults["samples"] = {};
    for (const n of SERVING_SIZES) {
      samples[n] = { now: [], before: [], again: [] };
      for (let round = 0; round < SERVING_ROUNDS; round++) {
        const order = rotated(arms, round);
        progress(
          `serving ${n} engines, round ${round + 1}/${SERVING_ROUNDS}: ${
            order.map(([a]) => a).join(", ")
          }`,
        );
        for (const [arm, mod] of order) {
          samples[n]![arm].push(await sample(bench, mod, n, arm));
        }
      }
    }
    progress("serving: wedge → stalled, under load and by the canary");
    const stallMs = await wedgeToStalled(bench, false);
    const canaryMs = await wedgeToStalled(bench, true);
    return { commit: tree.commit, samples, stallMs, canaryMs };
  } finally {
    await removeDir(dir);
  }
}
