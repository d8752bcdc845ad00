/**
 * The `--dry-run` rows: a 32-engine dry run beside `--help` and one
 * `nvidia-smi` look. They are reported, not judged: a dry run of a few
 * hundred milliseconds in front of minutes of GPU loading needs no ratio
 * (issue 28 retired issue 23's 1.2× bound).
 *
 * @module
 */
import { median } from "../plan.ts";
import { type Row, row } from "../report/table.ts";
import {
  DRY_RUN_ENGINES,
  DRY_RUN_GPUS,
  type DryRunResults,
} from "../phases/dry_run.ts";

/** The wall times: the dry run against --help + one look, and without GPUs against --help. */
export function dryRunRows(r: DryRunResults): Row[] {
  const base = median(r.help.map((ms, i) => ms + r.query[i]!));
  return [
    row("--help (process start and module load)", median(r.help), "ms"),
    row(
      "one stand-in nvidia-smi look (both queries at once)",
      median(r.query),
      "ms",
    ),
    row(
      `--dry-run, ${DRY_RUN_ENGINES} engines on ${DRY_RUN_GPUS} fake GPUs`,
      median(r.dryRun),
      "ms",
      { label: "--help + one look", value: base },
    ),
    row(
      "--dry-run --gpus none (its checks without nvidia-smi)",
      median(r.noGpus),
      "ms",
      { label: "--help", value: median(r.help) },
    ),
  ];
}
