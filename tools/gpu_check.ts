/**
 * `deno task gpu-check`: the GPU lifecycle on a machine with NVIDIA GPUs,
 * through the real CLI, with real `nvidia-smi` and an engine that holds real
 * GPU memory (tools/gpu_engine.py, PyTorch), one report row per scenario:
 *
 * - three shares (0.3, 0.3, 0.2) on one GPU: each sees only its device,
 *   loads staged, all healthy;
 * - crash during load, N times: each restart waits until `nvidia-smi` stops
 *   listing the dead pid; the driver's release time as a distribution;
 * - a foreign process holding most of the GPU: the engine waits naming it,
 *   and starts within one interval of the release;
 * - the launcher SIGKILLed: its watchdog stops every engine, the memory
 *   comes back;
 * - llama.cpp's llama-server built with CUDA serving the tiny GGUF, all
 *   layers on the GPU (skipped without `nvcc`);
 * - two llama.cpp cards with footprints in the book: one GPU when they fit,
 *   two when not (`--dry-run`);
 * - two vLLM cards with `sleep_after` that do not fit together on one GPU:
 *   the launcher puts one to sleep to start the other, then switches between
 *   them for alternating requests (tools/gpu_engine.py sleeps and wakes as
 *   vLLM does), none failed or out of memory, the switch's seconds reported;
 * - neighbours crashing on one GPU where `nvidia-smi` lists host pids (a
 *   container), a GPU reporting `[GPU requires reset]` (stand-in only), a
 *   pool given as UUIDs handed to vLLM as indices, and a liveness restart
 *   waiting while a neighbour loads (stand-in only).
 *
 * ```sh
 * deno task gpu-check                       # real GPUs; writes bench/results/gpu.md
 * deno task gpu-check --stand-in --report out.md   # the same against stand-ins, any machine
 * ```
 *
 * Exit 0 when every scenario passed (or was skipped, saying why), 1 when one
 * failed, 2 on bad input or a missing prerequisite, 3 when there is no NVIDIA
 * GPU. A failing scenario prints what it expected and what it saw; its
 * processes are stopped and its GPU memory waited for before the next one.
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { makeRoot } from "../tests/support/helpers.ts";
import { crashDuringLoad } from "./gpu_check/crash_scenario.ts";
import {
  containerRelease,
  deviceIds,
  gpuError,
  quietNeighbour,
} from "./gpu_check/container_scenarios.ts";
import { llamaCuda } from "./gpu_check/llama_scenario.ts";
import { llamaPacking } from "./gpu_check/packing_scenario.ts";
import { vllmSwitch } from "./gpu_check/vllm_switch_scenario.ts";
import {
  foreignHolder,
  launcherKilled,
  shares,
} from "./gpu_check/placement_scenarios.ts";
import { type Row, writeReport } from "./gpu_check/report.ts";
import {
  type CheckSettings,
  RESTART_DELAY_S,
  type Scenario,
} from "./gpu_check/scenario.ts";
import { Scope, Unmet, until } from "./gpu_check/scope.ts";
import {
  type GpuWorld,
  noGpu,
  realWorld,
  standInWorld,
} from "./gpu_check/world.ts";

/** Every scenario, in the order they run. */
export const SCENARIOS: readonly Scenario[] = [
  shares,
  crashDuringLoad,
  foreignHolder,
  launcherKilled,
  llamaCuda,
  llamaPacking,
  vllmSwitch,
  containerRelease,
  gpuError,
  deviceIds,
  quietNeighbour,
];

const DEFAULT_REPORT = fileURLToPath(
  new URL("../bench/results/gpu.md", import.meta.url),
);

const USAGE = `Usage: deno task gpu-check [--stand-in] [options]

Runs the GPU lifecycle through the launcher on this machine's NVIDIA GPU, with
real nvidia-smi and tools/gpu_engine.py (python3 with PyTorch) holding real
memory, and writes a report. --stand-in runs the same scenarios against the
stand-in nvidia-smi and engine, on any machine.

  --stand-in        stand-ins instead of the GPU (writes no bench/results/gpu.md
                    unless --report names it)
  --report PATH     where the report goes (default bench/results/gpu.md;
                    required with --stand-in)
  --gpu INDEX       the GPU to use (default: nvidia-smi's first)
  --crashes N       crashes observed by crash-during-load (default 10)
  --interval S      the launchers' --health-interval (default 1)
  --release-ms N    stand-in: how long a dead pid stays listed (default 1500)
  --only A,B        only these scenarios (${
  SCENARIOS.map((s) => s.id).join(", ")
})
  --break ID        fail scenario ID on purpose once it ran (tests the cleanup)
  -h, --help        this help

Exit: 0 all passed, 1 one failed, 2 bad input, 3 no NVIDIA GPU.`;

interface CheckOptions extends CheckSettings {
  standIn: boolean;
  report: string;
  gpu: string | undefined;
  releaseMs: number;
  only: Scenario[];
  broken: string | undefined;
}

function number(
  text: string | undefined,
  flag: string,
  fallback: number,
  min: number,
): number {
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!Number.isFinite(value) || value < min) {
    throw new Error(`--${flag}=${text}: expected a number of at least ${min}`);
  }
  return value;
}

/** The command line, or a usage error's line. */
function parse(args: string[]): CheckOptions | "help" {
  const { values } = parseArgs({
    args,
    strict: true,
    options: {
      "stand-in": { type: "boolean", default: false },
      report: { type: "string" },
      gpu: { type: "string" },
      crashes: { type: "string" },
      interval: { type: "string" },
      "release-ms": { type: "string" },
      only: { type: "string" },
      break: { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) return "help";
  const standIn = values["stand-in"]!;
  if (standIn && values.report === undefined) {
    throw new Error(
      "--stand-in needs --report PATH (bench/results/gpu.md is for a real GPU's report)",
    );
  }
  const known = new Map(SCENARIOS.map((s) => [s.id, s]));
  const noScenario = (flag: string, id: string) =>
    new Error(
      `--${flag}: no scenario '${id}' (expected ${
        [...known.keys()].join(", ")
      })`,
    );
  const only = values.only === undefined
    ? [...SCENARIOS]
    : values.only.split(",").map((id) => {
      const scenario = known.get(id.trim());
      if (!scenario) throw noScenario("only", id);
      return scenario;
    });
  if (values.break !== undefined && !known.has(values.break)) {
    throw noScenario("break", values.break);
  }
  return {
    standIn,
    report: values.report ?? DEFAULT_REPORT,
    gpu: values.gpu,
    crashes: number(values.crashes, "crashes", 10, 1),
    intervalS: number(values.interval, "interval", 1, 0.1),
    releaseMs: number(values["release-ms"], "release-ms", 1500, 0),
    only,
    broken: values.break,
  };
}

/** Whether the pids of compute apps are visible here: a probe holding 256 MiB. */
async function pidsVisible(world: GpuWorld, root: string): Promise<string> {
  const scope = new Scope(world, root);
  try {
    const probe = scope.spawn(world.engineCommand({ mib: 256 }));
    const listed = await until(
      async () => {
        const now = await world.listed();
        return now?.get(probe.pid);
      },
      world.mode === "real" ? 90_000 : 15_000,
      250,
    );
    return listed !== undefined
      ? `yes (a probe holding 256 MiB was listed as pid ${probe.pid}, ${listed} MiB)`
      : `**no**: a probe holding 256 MiB (pid ${probe.pid}) was never listed by \`--query-compute-apps\` (a separate pid namespace?): rule 2 cannot see a dead run here`;
  } finally {
    await scope.close(60_000);
  }
}

/** Runs one scenario in its own scope; never throws. */
async function runOne(
  scenario: Scenario,
  world: GpuWorld,
  options: CheckOptions,
  workRoot: string,
): Promise<Row> {
  const root = await makeRoot(undefined, workRoot);
  const scope = new Scope(world, root, [
    "--dev_mode",
    "--health-interval",
    String(options.intervalS),
    "--restart-max-delay",
    String(RESTART_DELAY_S),
  ]);
  const began = performance.now();
  let row: Row;
  try {
    await world.stage?.({}); // each scenario starts on a healthy stand-in
    const outcome = await scenario.run({ world, scope, settings: options });
    if (options.broken === scenario.id) {
      throw new Unmet(
        "a failure (--break)",
        "the scenario's own expectations all met",
      );
    }
    row = "skipped" in outcome
      ? { scenario, result: "SKIP", text: outcome.skipped }
      : {
        scenario,
        result: "PASS",
        text: outcome.summary,
        details: outcome.details ?? [],
      };
  } catch (error) {
    const text = error instanceof Unmet
      ? `expected ${error.expected}; saw ${error.saw}`
      : `stopped: ${error instanceof Error ? error.message : String(error)}`;
    row = { scenario, result: "FAIL", text };
  }
  const left = await scope.close(world.releaseBoundMs);
  if (left.length > 0) {
    row = {
      scenario,
      result: "FAIL",
      text: `${row.text}; left behind: ${left.join("; ")}`,
    };
  }
  return { ...row, ms: performance.now() - began };
}

async function check(options: CheckOptions): Promise<number> {
  if (!options.standIn) {
    const why = await noGpu();
    if (why !== undefined) {
      console.error(
        `gpu-check: no NVIDIA GPU here (${why}); run it on a machine with one, or use --stand-in`,
      );
      return 3;
    }
    const torch = await new Deno.Command("python3", {
      args: ["-c", "import torch; assert torch.cuda.is_available()"],
      stdout: "null",
      stderr: "null",
    }).output().catch(() => ({ code: 127 }));
    if (torch.code !== 0) {
      console.error(
        "gpu-check: its engine (tools/gpu_engine.py) needs python3 with PyTorch seeing CUDA: `python3 -c 'import torch; assert torch.cuda.is_available()'` failed",
      );
      return 2;
    }
  }
  const started = new Date();
  const began = performance.now();
  await using world = options.standIn
    ? await standInWorld(options.releaseMs)
    : await realWorld(options.gpu);
  const workRoot = world.work;
  const machine = await world.describe();
  machine.push(
    `- compute-app pids visible: ${await pidsVisible(
      world,
      `${workRoot}/probe`,
    )}`,
  );
  const rows: Row[] = [];
  for (const scenario of options.only) {
    console.log(`gpu-check: ${scenario.id} ...`);
    const row = await runOne(scenario, world, options, workRoot);
    console.log(`${row.result} ${scenario.id}: ${row.text}`);
    rows.push(row);
  }
  const failed = rows.filter((r) => r.result === "FAIL").length;
  await writeReport(options.report, {
    mode: world.mode,
    started,
    ms: performance.now() - began,
    args: Deno.args,
    settings: options,
    gpu: world.gpu,
    machine,
    rows,
  });
  console.log(
    `gpu-check: ${
      rows.length - failed
    } of ${rows.length} passed or skipped, ${failed} failed; report ${options.report}`,
  );
  return failed > 0 ? 1 : 0;
}

if (import.meta.main) {
  let options: CheckOptions | "help";
  try {
    options = parse(Deno.args);
  } catch (error) {
    console.error(`gpu-check: ${(error as Error).message.split("\n")[0]}`);
    Deno.exit(2);
  }
  if (options === "help") {
    console.log(USAGE);
    Deno.exit(0);
  }
  Deno.exit(await check(options));
}
