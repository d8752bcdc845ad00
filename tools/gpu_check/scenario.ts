/**
 * What a `gpu-check` scenario is and gets: the checked machine, its own
 * {@linkcode Scope} of processes (its launches carry the flags every scenario
 * shares), and what it returns (a summary for its report row, lines for the
 * details).
 *
 * @module
 */
import type { Scope } from "./scope.ts";
import type { GpuWorld } from "./world.ts";

/** The launchers' `--restart-max-delay`, in seconds (the report says it; crash-during-load subtracts it). */
export const RESTART_DELAY_S = 1;

/** How the check runs. */
export interface CheckSettings {
  /** `--health-interval` of the launchers it runs, in seconds. */
  readonly intervalS: number;
  /** Crashes observed by the crash-during-load scenario. */
  readonly crashes: number;
}

/** What a scenario gets. */
export interface ScenarioContext {
  readonly world: GpuWorld;
  readonly scope: Scope;
  readonly settings: CheckSettings;
}

/** A scenario's result: passed (failures throw `Unmet`), or skipped with a reason. */
export type Outcome =
  | { readonly summary: string; readonly details?: readonly string[] }
  | { readonly skipped: string };

/** One row of the report. */
export interface Scenario {
  /** Short name, e.g. `crash-during-load` (`--only`, `--break`). */
  readonly id: string;
  /** What it checks, for people. */
  readonly title: string;
  run(context: ScenarioContext): Promise<Outcome>;
}

/** Milliseconds as seconds with one decimal: `1.7 s`. */
export function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}

/**
 * The `q` quantile of `values`: the sorted list's entry at `q × length`
 * (the last for 1); undefined for no values.
 */
function quantile(
  values: readonly number[],
  q: number,
): number | undefined {
  if (values.length === 0) return undefined;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

/**
 * min / median / p90 / max of `values` (ms), in seconds: `0.12 / 0.50 /
 * 0.90 / 1.20 s`; the quantiles `at` instead when given; `(none)` for no
 * values.
 */
export function distribution(
  values: readonly number[],
  at: readonly number[] = [0, 0.5, 0.9, 1],
): string {
  if (values.length === 0) return "(none)";
  return at.map((q) => (quantile(values, q)! / 1000).toFixed(2)).join(" / ") +
    " s";
}
