/** Runs `deno task gpu-check` (tools/gpu_check.ts) for its tests, each run in a fresh TMPDIR. */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { processesWithEnv } from "./fake_gpus.ts";

const CHECK = fileURLToPath(
  new URL("../../tools/gpu_check.ts", import.meta.url),
);

export interface CheckRun {
  code: number;
  stdout: string;
  stderr: string;
  report: string | undefined;
  /** What the run left in its TMPDIR besides the report. */
  left: string[];
  /** Live processes whose environment names its TMPDIR. */
  running: number[];
}

/** Runs the check with `args` (and `--report` inside a fresh TMPDIR unless `report` is false). */
export async function runCheck(
  args: string[],
  env: Record<string, string> = {},
  report = true,
): Promise<CheckRun> {
  const tmp = await Deno.makeTempDir({ prefix: "serve-gpucheck-" });
  try {
    const reportPath = `${tmp}/report.md`;
    const output = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        CHECK,
        ...args,
        ...(report ? ["--report", reportPath] : []),
      ],
      env: { NO_COLOR: "1", TMPDIR: tmp, ...env },
      stdin: "null",
    }).output();
    const decode = (b: Uint8Array) => new TextDecoder().decode(b);
    const text = await Deno.readTextFile(reportPath).catch(() => undefined);
    const left = [...Deno.readDirSync(tmp)].map((e) => e.name).filter((n) =>
      n !== "report.md"
    );
    return {
      code: output.code,
      stdout: decode(output.stdout),
      stderr: decode(output.stderr),
      report: text,
      left,
      running: await processesWithEnv(`TMPDIR=${tmp}`),
    };
  } finally {
    await Deno.remove(tmp, { recursive: true });
  }
}

/** The report's scenario rows: id → result. */
export function rows(report: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const match of report.matchAll(/^\| .*\(`([a-z-]+)`\) \| (\w+) \|/gm)) {
    out.set(match[1]!, match[2]!);
  }
  return out;
}

/**
 * The stand-in scenarios in three parts, each its own test file so the
 * suite runs them side by side; together every scenario of the check.
 */
export const STAND_IN_PARTS = [
  "shares,crash-during-load,foreign-holder,launcher-killed,llama-cuda",
  "llama-packing,container-release,gpu-error,device-ids,quiet-neighbour",
  "vllm-switch",
] as const;

/** One part's stand-in run, checked as every run is: passed, said to be no GPU measurement, nothing left behind. */
export async function standInPart(only: string): Promise<CheckRun> {
  const run = await runCheck(["--stand-in", "--crashes", "3", "--only", only]);
  assert.equal(run.code, 0, run.stdout + run.stderr);
  assert.ok(run.report, "a report");
  assert.match(run.report, /^# GPU check — stand-in run \(no GPU\)/);
  assert.match(run.report, /\*\*Not a GPU measurement\.\*\*/);
  assert.match(run.report, /compute-app pids visible: yes/);
  assert.deepEqual(run.left, [], "the check removed its temp folders");
  assert.deepEqual(run.running, [], "no process left running");
  return run;
}
