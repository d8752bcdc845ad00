/**
 * The plan as people read it (`--dry-run` without `--json`): one row per
 * engine, in the status view's column order; each engine's command line and
 * the environment the launcher adds; one row per GPU; the warnings.
 *
 * @module
 */
import { alignColumns } from "../common/columns.ts";
import type { PlanEngine, PlanGpu, StartPlan } from "./start_plan.ts";

/**
 * The engine table's columns. Those the status view also shows (MODEL, VERB,
 * GPUS, URL) come in its order (`status/table.ts`'s `COLUMNS`), so the two
 * read alike.
 */
export const PLAN_COLUMNS = [
  "MODEL",
  "VERB",
  "ENGINE",
  "PORT",
  "GPUS",
  "WAITS FOR",
  "URL",
  "LOG",
] as const;

/** The GPU table's columns. */
export const GPU_COLUMNS = [
  "GPU",
  "TOTAL",
  "FREE",
  "ENGINES",
  "THEY NEED",
  "HELD BY OTHERS",
] as const;

/**
 * Renders the plan for people.
 *
 * @param plan What {@linkcode startPlan} built.
 * @returns The text, ending without a newline.
 *
 * @example
 * ```ts ignore
 * console.log(renderPlan(await serve.plan()));
 * ```
 */
export function renderPlan(plan: StartPlan): string {
  const out = [
    `Plan (dry run: nothing started): ${plan.engines.length} engine(s), management API ${plan.management_url}, root ${plan.directory}`,
    "",
    alignColumns(PLAN_COLUMNS, plan.engines.map(engineCells)),
    "",
    "Command lines:",
  ];
  for (const engine of plan.engines) {
    out.push(`  ${engine.name}:`);
    const env = Object.entries(engine.env);
    if (env.length > 0) {
      out.push(`    ${env.map(([k, v]) => `${k}=${shellWord(v)}`).join(" ")}`);
    }
    out.push(`    ${engine.command.map(shellWord).join(" ")}`);
  }
  out.push("", plan.gpu_pool);
  if (plan.gpus.length > 0) {
    out.push(alignColumns(GPU_COLUMNS, plan.gpus.map(gpuCells)));
  }
  out.push("");
  if (plan.warnings.length === 0) out.push("No warnings.");
  else {
    out.push(`Warnings (${plan.warnings.length}):`);
    for (const warning of plan.warnings) out.push(`  ${warning}`);
  }
  return out.join("\n");
}

function engineCells(e: PlanEngine): string[] {
  const gpus = e.gpus === null
    ? "-"
    : e.gpus.length === 0
    ? "none"
    : e.share !== null && e.share < 1
    ? `${e.gpus.join(",")} (${e.share})`
    : e.gpus.join(",");
  return [
    e.name,
    e.verb,
    e.engine,
    String(e.port),
    gpus,
    e.waits_for.length === 0 ? "-" : e.waits_for.join(","),
    e.url,
    e.log,
  ];
}

function gpuCells(g: PlanGpu): string[] {
  return [
    g.device,
    mib(g.total_mib),
    g.error ?? mib(g.free_mib),
    g.engines.length === 0
      ? "-"
      : g.engines.map((e) => e.share < 1 ? `${e.name} ${e.share}` : e.name)
        .join(", "),
    mib(g.need_mib),
    g.holders.length === 0
      ? "-"
      : g.holders.map((h) => `pid ${h.pid} (${h.process}, ${h.used_mib} MiB)`)
        .join("; "),
  ];
}

function mib(value: number | null): string {
  return value === null ? "?" : `${value} MiB`;
}

/** A word as a POSIX shell reads it: quoted only when it must be. */
function shellWord(word: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(word)
    ? word
    : `'${word.replaceAll("'", `'\\''`)}'`;
}
