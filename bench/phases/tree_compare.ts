/**
 * This tree against an earlier commit of it, in one run: 32-engine launchers
 * with no GPU pool started in rotating rounds of three arms (this tree, the
 * earlier tree exported by `git archive`, this tree again as the A/A control
 * that says how large the noise is), with stand-in engines, then with
 * sleep-like ones (the launcher's own start-up). Both trees run with this
 * tree's `deno.json`, so only their code differs.
 *
 * @module
 */
import { freePorts } from "../../tests/support/helpers.ts";
import { exportTree } from "../servers/before_tree.ts";
import { spawnLauncher, waitHealthy } from "../servers/spawn.ts";
import {
  type Bench,
  engineNames,
  MANY,
  median,
  progress,
  removeDir,
  rotated,
} from "../plan.ts";

const MOD = new URL("../../mod.ts", import.meta.url).pathname;
const CONFIG = new URL("../../deno.json", import.meta.url).pathname;

/** One start of a 32-engine launcher. */
export interface StartSample {
  /** Spawn → "listening on", in ms. */
  listen: number;
  /** Spawn → every engine healthy, in ms; NaN for sleep-like engines, which never answer. */
  healthy: number;
  /**
   * The launcher process's own CPU (user + system, engines excluded) when
   * "listening on" arrives, in ms: steadier than wall time on a busy machine.
   */
  cpu: number;
  /**
   * The launcher's VmRSS in MiB (engines excluded) once every engine is
   * healthy, or right after "listening on" with sleep-like engines.
   */
  rss: number;
  /**
   * Median time of {@linkcode MODELS_ASKS} sequential `GET /models` once every
   * engine is healthy (each polls all engines), in ms; NaN for sleep-like engines.
   */
  models: number;
}

/** How many `GET /models` each stand-in start is asked, one at a time. */
export const MODELS_ASKS = 20;

/** The three arms of one kind of start; index i of each is round i. */
export interface Arms {
  now: StartSample[];
  before: StartSample[];
  /** This tree again: the A/A control. */
  again: StartSample[];
}

/** The rounds of one comparison. */
export interface TreeComparison {
  /** The exported commit, abbreviated. */
  commit: string;
  /** Stand-in Deno engines. */
  standIn: Arms;
  /** Sleep-like engines (`exec sleep 600`): the launcher's own start-up. */
  sleepLike: Arms;
}

/** This process's PATH without directories holding an `nvidia-smi`. */
export function pathWithoutNvidiaSmi(): string {
  return (Deno.env.get("PATH") ?? "").split(":").filter((dir) => {
    try {
      Deno.statSync(`${dir}/nvidia-smi`);
      return false;
    } catch {
      return true;
    }
  }).join(":");
}

async function startSample(
  bench: Bench,
  mod: string,
  label: string,
  sleepLike = false,
): Promise<StartSample> {
  await using stack = new AsyncDisposableStack();
  const names = engineNames(MANY);
  const port = freePorts(MANY);
  const bin = sleepLike ? bench.sleepBin : bench.bin;
  const child = await spawnLauncher(bench, stack, names, port, {
    mod,
    config: CONFIG,
    path: `${bin}:${pathWithoutNvidiaSmi()}`,
    args: ["--gpus", "none"],
    label: sleepLike ? `sleep-like, ${label}` : label,
  });
  const line = await child.waitForLine(/listening on /);
  const cpu = child.cpuSeconds() * 1000;
  let healthy = Number.NaN;
  let models = Number.NaN;
  if (!sleepLike) {
    await waitHealthy(bench, child, port, names, 30_000, 100);
    healthy = performance.now() - child.spawnedAt;
  }
  // Idle RSS before the /models asks, as before they were measured.
  const rss = child.rssKiB() / 1024;
  if (!sleepLike) models = await modelsMs(bench, port);
  const stop = await child.stop("SIGTERM");
  if (stop.forced || !stop.status.success) {
    throw new Error(
      `${child.name} did not stop cleanly on SIGTERM (code ${stop.status.code}):\n${child.tail()}`,
    );
  }
  return { listen: line.at - child.spawnedAt, healthy, cpu, rss, models };
}

/** The median of {@linkcode MODELS_ASKS} sequential `GET /models`, in ms. */
async function modelsMs(bench: Bench, port: number): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < MODELS_ASKS; i++) {
    const began = performance.now();
    const response = await fetch(`http://127.0.0.1:${port}/models`, {
      client: bench.client,
      signal: AbortSignal.timeout(10_000),
    });
    await response.arrayBuffer();
    if (!response.ok) {
      throw new Error(`GET /models answered ${response.status}`);
    }
    times.push(performance.now() - began);
  }
  return median(times);
}

/**
 * This tree, `commit`'s tree and this tree again, order rotated each round,
 * with stand-in engines, then with sleep-like ones.
 *
 * @param bench The run.
 * @param commit The earlier commit.
 * @param what Names the comparison in progress lines.
 * @param rounds A multiple of 3, so each arm takes each place equally often.
 * @returns The samples, or why the earlier tree is not available.
 */
export async function compareTrees(
  bench: Bench,
  commit: string,
  what: string,
  rounds: number,
): Promise<TreeComparison | string> {
  const dir = `${bench.work}/before-${commit}`;
  try {
    const tree = await exportTree(commit, dir);
    if ("skipped" in tree) return tree.skipped;
    const arms: [keyof Arms, string, string][] = [
      ["now", MOD, "this tree"],
      ["before", tree.mod, `${what}, ${tree.commit}`],
      ["again", MOD, "this tree, A/A control"],
    ];
    // Unmeasured starts first: every measured one finds its modules compiled.
    progress(`${what}: warm-up starts of this tree and ${tree.commit}`);
    for (const mod of [MOD, tree.mod]) {
      await startSample(bench, mod, "warm-up");
      await startSample(bench, mod, "warm-up", true);
    }
    const out: TreeComparison = {
      commit: tree.commit,
      standIn: { now: [], before: [], again: [] },
      sleepLike: { now: [], before: [], again: [] },
    };
    for (let round = 0; round < rounds; round++) {
      const order = rotated(arms, round);
      progress(
        `${what} ${round + 1}/${rounds}, ${MANY} engines, no pool: ${
          order.map(([key]) => key).join(", ")
        }, with stand-in then sleep-like engines`,
      );
      for (const [key, mod, label] of order) {
        out.standIn[key].push(await startSample(bench, mod, label));
      }
      for (const [key, mod, label] of order) {
        out.sleepLike[key].push(await startSample(bench, mod, label, true));
      }
    }
    return out;
  } finally {
    await removeDir(dir);
  }
}
