/**
 * The `--dry-run` row and target: a 32-engine dry run ÷ (`--help` + one
 * `nvidia-smi` look), the median of per-round ratios.
 *
 * @module
 */
import { median } from "../plan.ts";
import { range, type Row, row, type Verdict } from "../report/table.ts";
import {
  DRY_RUN_ENGINES,
  DRY_RUN_GPUS,
  type DryRunResults,
} from "../phases/dry_run.ts";

/** Issue 23: a dry run takes at most this × (--help + one nvidia-smi look). */
const DRY_RUN_TARGET = 1.2;

function ratios(r: DryRunResults): number[] {
  return r.dryRun.map((ms, i) => ms / (r.help[i]! + r.query[i]!));
}

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

/** The bound, on the median of per-round ratios. */
export function dryRunTargets(r: DryRunResults): Verdict[] {
  const each = ratios(r);
  const ratio = median(each);
  return [{
    name: `--dry-run ≤ ${DRY_RUN_TARGET}× (--help + one nvidia-smi look)`,
    pass: ratio <= DRY_RUN_TARGET,
    detail: `median of ${each.length} per-round ratios ${
      ratio.toFixed(2)
    }× (range ${range(each)})`,
  }];
}
