/**
 * The GPU lifecycle phase (issue 17's benchmark rows):
 *
 * - the gate's cost when it has nothing to do: a launcher with 32 stand-in
 *   engines and no GPU pool (`--gpus none`, no `nvidia-smi` on PATH), spawn
 *   → "listening on" and → every engine healthy, this tree against the tree
 *   before the gate existed (commit {@linkcode BEFORE_GATE}, exported with
 *   `git archive`) and against itself (the A/A control that says how large
 *   the noise is), in rotating rounds; then the same with 32 sleep-like
 *   engines, which leaves the launcher's own start-up (the part the gate's
 *   code could slow) without 32 Deno processes booting beside it;
 * - the health round on GPUs: 8 stand-in engines on 8 fake devices with the
 *   stand-in `nvidia-smi` (tests/fixtures/nvidia_smi.ts) on PATH and
 *   `--health-interval 0.5`: `--query-compute-apps` calls per health round,
 *   also with 2 engines, and the launcher's own CPU time per round against
 *   the same launcher without `nvidia-smi` on PATH.
 *
 * Everything runs on loopback inside the bench's work directory (the
 * exported tree and the fake GPU machine too), and every launcher is stopped
 * before the next starts.
 *
 * @module
 */
import { freePorts, pathWith } from "../../tests/support/helpers.ts";
import {
  fakeDevices,
  type FakeGpuMachine,
  fakeGpuMachine,
} from "../../tests/support/fake_gpus.ts";
import type { Child } from "../servers/process.ts";
import { exportTree } from "../servers/before_tree.ts";
import { MetricsWrites } from "../load/metrics_writes.ts";
import { standInQueryMs } from "../servers/nvidia_smi_look.ts";
import { makeRootIn, spawnLauncher, waitHealthy } from "../servers/spawn.ts";
import {
  type Bench,
  engineNames,
  MANY,
  median,
  PLAN,
  progress,
  removeDir,
  rotated,
} from "../plan.ts";

/** The last commit before the GPU start gate (issue 17). */
export const BEFORE_GATE = "34949b2";

const MOD = new URL("../../mod.ts", import.meta.url).pathname;
/** Both trees run with this tree's `deno.json`, so only their code differs. */
const CONFIG = new URL("../../deno.json", import.meta.url).pathname;
const COMPUTE_APPS = "--query-compute-apps";

/** One start of a 32-engine launcher, in ms from its spawn. */
export interface StartSample {
  listen: number;
  /** NaN for sleep-like engines, which never answer. */
  healthy: number;
  /**
   * The launcher process's own CPU (user + system, engines excluded) when
   * "listening on" arrives: steadier than wall time on a busy machine.
   */
  cpu: number;
}

/** The three arms of one kind of start; index i of each is round i. */
export interface Arms {
  now: StartSample[];
  before: StartSample[];
  /** This tree again: the A/A control. */
  again: StartSample[];
}

/** The gate-cost rounds. */
export interface GateCost {
  /** The exported commit, abbreviated. */
  commit: string;
  /** Stand-in Deno engines. */
  standIn: Arms;
  /** Sleep-like engines (`exec sleep 600`): the launcher's own start-up. */
  sleepLike: Arms;
}

/** One measured window of health rounds. */
export interface RoundWindow {
  engines: number;
  /** Whether the stand-in `nvidia-smi` was on PATH. */
  nvidiaSmi: boolean;
  /** From the first counted round's end to the last one's, in ms. */
  ms: number;
  /** Health rounds in the window (metrics file rewrites). */
  rounds: number;
  /** `--query-compute-apps` calls the stand-in answered in the window. */
  queries: number;
  /** Every call of the stand-in in the window (both queries). */
  calls: number;
  /** The launcher process's user + system CPU in the window, in seconds. */
  cpu: number;
}

/** What the phase measured. */
export interface GpuResults {
  /** Undefined with `skipped` when the earlier tree is not available. */
  gate: GateCost | undefined;
  skipped: string | undefined;
  /** 8 engines, stand-in `nvidia-smi`. */
  eight: RoundWindow;
  /** 2 engines, stand-in `nvidia-smi`. */
  two: RoundWindow;
  /** 8 engines, no `nvidia-smi` on PATH. */
  bare: RoundWindow;
  /** Wall time of one stand-in query (both runs at once, as the launcher asks), ms, median of 3. */
  standInMs: number;
  /** Processes still naming the fake machine's ledger after every launcher stopped (killed then). */
  leftovers: number;
}

/** This process's PATH without directories holding an `nvidia-smi`. */
function pathWithoutNvidiaSmi(): string {
  return (Deno.env.get("PATH") ?? "").split(":").filter((dir) => {
    try {
      Deno.statSync(`${dir}/nvidia-smi`);
      return false;
    } catch {
      return true;
    }
  }).join(":");
}

/**
 * One start of a 32-engine launcher without a pool: spawn → listening, and
 * with stand-in engines → all healthy.
 */
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
  if (!sleepLike) {
    await waitHealthy(bench, child, port, names, 30_000, 100);
    healthy = performance.now() - child.spawnedAt;
  }
  await stopOrThrow(child);
  return { listen: line.at - child.spawnedAt, healthy, cpu };
}

async function stopOrThrow(child: Child): Promise<void> {
  const stop = await child.stop("SIGTERM");
  if (stop.forced || !stop.status.success) {
    throw new Error(
      `${child.name} did not stop cleanly on SIGTERM (code ${stop.status.code}):\n${child.tail()}`,
    );
  }
}

/**
 * This tree, the tree before the gate and this tree again, order rotated
 * each round, with stand-in engines, then with sleep-like ones.
 */
async function gateCost(bench: Bench): Promise<GateCost | string> {
  const dir = `${bench.work}/before-${BEFORE_GATE}`;
  try {
    const tree = await exportTree(BEFORE_GATE, dir);
    if ("skipped" in tree) return tree.skipped;
    const arms: [keyof Arms, string, string][] = [
      ["now", MOD, "this tree"],
      ["before", tree.mod, `before the gate, ${tree.commit}`],
      ["again", MOD, "this tree, A/A control"],
    ];
    // Unmeasured starts first: every measured one finds its modules compiled.
    progress(`gate cost: warm-up starts of this tree and ${tree.commit}`);
    for (const mod of [MOD, tree.mod]) {
      await startSample(bench, mod, "warm-up");
      await startSample(bench, mod, "warm-up", true);
    }
    const out: GateCost = {
      commit: tree.commit,
      standIn: { now: [], before: [], again: [] },
      sleepLike: { now: [], before: [], again: [] },
    };
    for (let round = 0; round < PLAN.gateRounds; round++) {
      const order = rotated(arms, round);
      progress(
        `gate cost ${round + 1}/${PLAN.gateRounds}, ${MANY} engines, no pool: ${
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

/** `g1`..`gN`: one whole device each, 1000 MiB in the stand-in's ledger. */
function gpuCatalogueYaml(count: number): string {
  const lines = [
    "# Generated by bench/phases/gpu.ts: stand-in engines on one fake GPU each.",
    "models:",
  ];
  for (let i = 1; i <= count; i++) {
    lines.push(
      `  g${i}: { verb: chat, hub: org/g${i}, gpus: 1, args: { fake-gpu-mib: 1000 } }`,
    );
  }
  return `${lines.join("\n")}\n`;
}

/** Calls the stand-in has logged: all of them, and `--query-compute-apps` ones. */
async function standInCalls(
  machine: FakeGpuMachine,
): Promise<{ calls: number; queries: number }> {
  let text = "";
  try {
    text = await Deno.readTextFile(`${machine.ledger}/calls`);
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
  }
  // Counted by line, not parsed: a line being appended right now may be half there.
  const lines = text.split("\n").filter(Boolean);
  return {
    calls: lines.length,
    queries: lines.filter((line) => line.includes(COMPUTE_APPS)).length,
  };
}

/**
 * A launcher with `engines` engines on the fake GPUs: once every engine is
 * healthy and two more rounds have passed, the window opens at the end of a
 * round and closes at the end of the first round after
 * `PLAN.gpuWindowSeconds`; calls and CPU are read right at those two ends.
 */
async function roundWindow(
  bench: Bench,
  machine: FakeGpuMachine,
  catalogue: string,
  engines: number,
  nvidiaSmi: boolean,
): Promise<RoundWindow> {
  await using stack = new AsyncDisposableStack();
  const root = await makeRootIn(bench.work);
  const writes = stack.use(new MetricsWrites(`${root}/metrics`));
  const names = Array.from({ length: engines }, (_, i) => `g${i + 1}`);
  const port = freePorts(engines);
  const launcher = await spawnLauncher(bench, stack, names, port, {
    root,
    catalogue,
    path: nvidiaSmi
      ? pathWith(`${machine.bin}:${bench.bin}`)
      : `${bench.bin}:${pathWithoutNvidiaSmi()}`,
    env: { FAKE_GPU_LEDGER: machine.ledger },
    args: [
      "--gpus",
      `0-${PLAN.gpuEngines - 1}`,
      "--health-interval",
      String(PLAN.gpuIntervalSeconds),
    ],
    label: nvidiaSmi ? "stand-in nvidia-smi" : "no nvidia-smi",
  });
  await launcher.waitForLine(/listening on /);
  await waitHealthy(bench, launcher, port, names, 30_000);
  // Two full rounds after every engine is up: start-up writes are over.
  await writes.waitFor(writes.count + 2, bench.signal);
  const first = writes.count;
  const start = {
    at: writes.times[first - 1] as number,
    cpu: launcher.cpuSeconds(),
    ...await standInCalls(machine),
  };
  const until = start.at + PLAN.gpuWindowSeconds * 1000;
  let last = first;
  while ((writes.times[last - 1] as number) < until) {
    await writes.waitFor(last + 1, bench.signal);
    last = writes.count;
  }
  const end = {
    at: writes.times[last - 1] as number,
    cpu: launcher.cpuSeconds(),
    ...await standInCalls(machine),
  };
  await stopOrThrow(launcher);
  return {
    engines,
    nvidiaSmi,
    ms: end.at - start.at,
    rounds: last - first,
    queries: end.queries - start.queries,
    calls: end.calls - start.calls,
    cpu: end.cpu - start.cpu,
  };
}

/** SIGKILLs processes still naming the ledger; returns how many there were. */
async function killLeftovers(machine: FakeGpuMachine): Promise<number> {
  const pids = await machine.processes();
  for (const pid of pids) {
    try {
      Deno.kill(pid, "SIGKILL");
    } catch {
      // Gone meanwhile.
    }
  }
  return pids.length;
}

/** The gate-cost rounds, then the three health-round windows. */
export async function gpuPhase(bench: Bench): Promise<GpuResults> {
  const gate = await gateCost(bench);
  if (typeof gate === "string") progress(`gate cost skipped: ${gate}`);
  const machine = await fakeGpuMachine(
    { devices: fakeDevices(PLAN.gpuEngines) },
    bench.work,
  );
  try {
    const catalogue = `${machine.dir}/catalogue.yaml`;
    await Deno.writeTextFile(catalogue, gpuCatalogueYaml(PLAN.gpuEngines));
    const timings: number[] = [];
    for (let i = 0; i < 3; i++) timings.push(await standInQueryMs(machine));
    const s = PLAN.gpuWindowSeconds;
    const n = PLAN.gpuEngines;
    progress(
      `health rounds: ${n} engines on ${n} fake GPUs, stand-in nvidia-smi, ~${s} s`,
    );
    const eight = await roundWindow(bench, machine, catalogue, n, true);
    progress(`health rounds: 2 engines, stand-in nvidia-smi, ~${s} s`);
    const two = await roundWindow(bench, machine, catalogue, 2, true);
    progress(`health rounds: ${n} engines, no nvidia-smi on PATH, ~${s} s`);
    const bare = await roundWindow(bench, machine, catalogue, n, false);
    return {
      gate: typeof gate === "string" ? undefined : gate,
      skipped: typeof gate === "string" ? gate : undefined,
      eight,
      two,
      bare,
      standInMs: median(timings),
      leftovers: await killLeftovers(machine),
    };
  } finally {
    await killLeftovers(machine);
    await removeDir(machine.dir);
  }
}
