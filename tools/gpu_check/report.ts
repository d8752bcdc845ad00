/**
 * The `gpu-check` report, in Markdown: the machine, the settings, one row
 * per scenario, then each scenario's details. A stand-in run says so at the
 * top, in words no reader can take for a GPU measurement.
 *
 * @module
 */
import { dirname } from "node:path";
import type { GpuDevice } from "../../src/gpu/nvidia_smi.ts";
import type { CheckSettings, Scenario } from "./scenario.ts";
import { RESTART_DELAY_S, seconds } from "./scenario.ts";

/** One scenario's row. */
export interface Row {
  readonly scenario: Scenario;
  readonly result: "PASS" | "FAIL" | "SKIP";
  /** The summary, the skip's reason, or what was expected and seen. */
  readonly text: string;
  readonly details?: readonly string[];
  readonly ms?: number;
}

/** Everything the report says. */
export interface Report {
  readonly mode: "real" | "stand-in";
  readonly started: Date;
  readonly ms: number;
  readonly args: readonly string[];
  readonly settings: CheckSettings;
  readonly gpu: GpuDevice;
  readonly machine: readonly string[];
  readonly rows: readonly Row[];
}

function cell(text: string): string {
  return text.replaceAll("|", "\\|").replaceAll("\n", " ");
}

/** The report's Markdown. */
export function renderReport(report: Report): string {
  const standIn = report.mode === "stand-in";
  const lines = [
    standIn ? "# GPU check — stand-in run (no GPU)" : "# GPU check — real GPU",
    "",
  ];
  if (standIn) {
    lines.push(
      "> **Not a GPU measurement.** This run used the stand-in `nvidia-smi` and stand-in",
      "> engines: it shows that the check and the launcher's GPU logic run end to end, and",
      "> nothing about a real driver (release times here are the stand-in's own setting).",
      "",
    );
  }
  lines.push(
    `Run ${report.started.toISOString()}, ${
      seconds(report.ms)
    } in all: \`deno task gpu-check${
      report.args.length ? " " + report.args.join(" ") : ""
    }\`. Launchers ran with \`--health-interval ${report.settings.intervalS} --restart-max-delay ${RESTART_DELAY_S}\`, ` +
      `\`--gpu-release-timeout\` at its default (30 s), on GPU ${report.gpu.index} (${report.gpu.uuid}, ${report.gpu.totalMiB} MiB).`,
    "",
    "## Machine",
    "",
    ...report.machine,
    "",
    "## Scenarios",
    "",
    "| scenario | result | what was seen | time |",
    "| --- | --- | --- | --- |",
  );
  for (const row of report.rows) {
    lines.push(
      `| ${
        cell(row.scenario.title)
      } (\`${row.scenario.id}\`) | ${row.result} | ${cell(row.text)} | ${
        row.ms === undefined ? "" : seconds(row.ms)
      } |`,
    );
  }
  for (const row of report.rows) {
    if (!row.details?.length) continue;
    lines.push("", `### ${row.scenario.id}`, "", ...row.details);
  }
  return lines.join("\n") + "\n";
}

/** Writes the report to `path` (its folder created), atomically. */
export async function writeReport(path: string, report: Report): Promise<void> {
  await Deno.mkdir(dirname(path), { recursive: true });
  const tmp = `${path}.${Deno.pid}.tmp`;
  await Deno.writeTextFile(tmp, renderReport(report));
  await Deno.rename(tmp, path);
}
