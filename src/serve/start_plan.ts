// A plan rendered: the JSON of `--dry-run --json` and {@linkcode Semioserve.plan},
// a contract for scripts (no key renamed or removed), and the text for people.
import { alignColumns } from "../common/columns.ts";
import { deviceOf } from "../gpu/nvidia_smi.ts";
import { gpuPoolLine, startWaits } from "../gpu/placement.ts";
import { procStats } from "../engines/proc.ts";
import { masked } from "../engines/engine_plan.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";
import { launcherSleep, sleepSeconds } from "../engines/sleep_after.ts";
import { deviceLoad } from "../gpu/layout.ts";
import { startsAsleep } from "../gpu/make_room.ts";
import { measuredOf } from "../gpu/footprint_book.ts";
import { urlHost } from "../common/settings.ts";
import type { Plan } from "./plan.ts";
import type { Facts } from "./facts.ts";

/**
 * What a start would do. `ok` is always true: a start that would be refused
 * throws instead (`--dry-run` prints that one line and exits 1).
 *
 * @example
 * ```json
 * {"ok": true, "engines": [{"name": "bge-m3", "port": 5001, "gpus": ["0"], "share": 0.3,
 *   "command": ["vllm", "serve", "BAAI/bge-m3", "--api-key", "***"], "waits_for": []}],
 *  "gpus": [{"device": "0", "total_mib": 81920, "free_mib": 81920, "engines": [{"name": "bge-m3", "share": 0.3}]}],
 *  "warnings": []}
 * ```
 */
export interface StartPlan {
  /** Always true. */
  ok: true;
  /** The root directory. */
  directory: string;
  /** Where the management API would listen. */
  management_url: string;
  /** Where the GPU pool comes from, as the start logs it. */
  gpu_pool: string;
  /** One entry per engine, in request order. */
  engines: {
    name: string;
    verb: string;
    port: number;
    url: string;
    engine: string;
    /** Its devices; `[]` for none, null when not placed. */
    gpus: string[] | null;
    /** The share of each of its devices: 1 for whole devices, null when not placed. */
    share: number | null;
    /** The full command line, the engine API key as `***`. */
    command: string[];
    /** What the launcher adds to its environment: the card's `env` and the placement's. */
    env: Record<string, string>;
    /** Engines it waits for at the GPU start gate (rule 1: one load per device, request order). */
    waits_for: string[];
    log: string;
    /** Its local weights' size in bytes; null when it fetches them from the hub (or they cannot be read). */
    weights_bytes: number | null;
  }[];
  /** One entry per device of the pool (and pinned devices outside it). */
  gpus: {
    /** The entry as `CUDA_VISIBLE_DEVICES` gets it. */
    device: string;
    /** From `nvidia-smi`; null when unknown. */
    total_mib: number | null;
    free_mib: number | null;
    /** The engines placed on it, with the share each takes (1: the whole device) and the MiB each needs there (null: not known). */
    engines: {
      name: string;
      share: number;
      need_mib: number | null;
      /** `measured …`, `gpu_memory …`, `estimated: …` or `not measured yet`. */
      need_from: string;
      /** Where it may sleep (`sleep_after`, or its kind's flag in `args`). `itself` (llama.cpp): it wakes itself, so `need_mib` (awake) stays counted asleep. `launcher` (vLLM): only `asleep_mib` is held for it while others wake, and `starts` says whether it is put to sleep to make room once the start has loaded every engine. `asleep_mib`: its residue where the book knows it (else, launcher-woken, its kind's estimate: `asleep_from`). */
      sleep?: {
        after_seconds: number;
        woken_by: "itself" | "launcher";
        awake_mib: number | null;
        asleep_mib: number | null;
        asleep_from?: string;
        starts?: "awake" | "asleep";
      };
    }[];
    /** Free memory its engines demand before they start (vLLM's gpu-memory-utilization × total …; launcher-woken ones: their residues and room for the largest to wake); null when unknown. */
    need_mib: number | null;
    /** What is left once every engine has loaded (some put to sleep to make room); null when unknown. */
    left_mib?: number | null;
    /** Processes holding memory there now; no engine of this plan runs yet. */
    holders: {
      pid: number;
      used_mib: number;
      /** What it is: its command name, a running launcher's engine, or `not visible here`. */
      process: string;
    }[];
    /** Present when its memory reads as an error: nvidia-smi's words (`[GPU requires reset]`); nothing starts there until it reports memory again. */
    error?: string;
  }[];
  /** Warnings a start would log, and what a start would do beside a running launcher. */
  warnings: string[];
}

type PlanEngine = StartPlan["engines"][number];
type PlanGpu = StartPlan["gpus"][number];

/** The plan as `--dry-run --json` prints it (the engine API key as `***`). */
export function startPlan(plan: Plan, facts: Facts): StartPlan {
  const { placement } = plan;
  const { snapshot } = facts;
  const scheme = plan.tls ? "https" : "http";
  const waits = startWaits(
    plan.engines.map((e) => ({ name: e.name, devices: e.placement.gpus })),
  );
  const engines = plan.engines.map((e): PlanEngine => {
    const weights = facts.weights[e.name];
    return {
      name: e.name,
      verb: e.card.verb,
      port: e.port,
      url: e.url,
      engine: e.card.engine,
      gpus: e.placement.gpus && [...e.placement.gpus],
      share: e.placement.share,
      command: [e.executable, ...e.args].map((arg) => masked(e, arg)),
      env: Object.fromEntries(
        Object.entries(e.env).map(([key, value]) => [key, masked(e, value)]),
      ),
      waits_for: waits.get(e.name) ?? [],
      log: e.logFile,
      weights_bytes: weights?.kind === "local" ? weights.bytes : null,
    };
  });
  const devices = new Set<string>([
    ...placement.detection.pool?.entries ?? [],
    ...engines.flatMap((engine) => engine.gpus ?? []),
  ]);
  const owners = new Map<number, string>();
  for (const r of facts.survey?.live ?? []) {
    owners.set(r.pid, `engine ${r.model} of launcher pid ${r.launcherPid}`);
  }
  const listed = snapshot?.processes ?? [];
  const unfit: string[] = [];
  const live = procStats(listed.map((p) => p.pid));
  const gpus = [...devices].map((entry): PlanGpu => {
    const device = snapshot && deviceOf(entry, snapshot);
    const known = device?.memoryKnown === true;
    const placed = plan.engines.filter((e) =>
      e.placement.gpus?.includes(entry)
    );
    const on = placed.map((e): PlanGpu["engines"][number] => {
      const m = e.placement.memoryNeed;
      const mib = m?.mib ?? (known && m ? m.fraction * device!.totalMiB : null);
      const need = mib === null ? null : Math.ceil(mib);
      const kind = ENGINE_KINDS[e.card.engine];
      const after = sleepSeconds(e.card, kind);
      const book = measuredOf(facts.footprints.entries, e.card);
      const routes = launcherSleep(e.card, kind);
      const residue = book[device?.name ?? ""]?.residue_mib ?? null;
      return {
        name: e.name,
        share: e.placement.share ?? 1,
        need_mib: need,
        need_from: !m
          ? "not measured yet"
          : m.mib
          ? m.from
          : `estimated: ${m.from}`,
        ...after && {
          sleep: {
            after_seconds: after,
            woken_by: routes ? "launcher" as const : "itself" as const,
            awake_mib: need,
            asleep_mib: residue ?? routes?.residueMiB ?? null,
            ...routes && residue === null
              ? { asleep_from: `estimated: ${routes.residueFrom}` }
              : {},
          },
        },
      };
    });
    // The device's ledger: launcher-woken engines hold their residues, and room for the largest to wake.
    const need = deviceLoad(
      on.map((e) => ({
        devices: [entry],
        need: { kind: "unplaced", from: "" },
        mib: e.need_mib ?? 0,
        ...e.sleep?.woken_by === "launcher"
          ? { residueMiB: e.sleep.asleep_mib ?? 0 }
          : {},
      })),
      0,
    );
    const loads = known
      ? startsAsleep(
        placed.map((e, i) => ({
          name: e.name,
          needMiB: on[i]!.need_mib ?? 0,
          ...on[i]!.sleep?.woken_by === "launcher"
            ? { residueMiB: on[i]!.sleep!.asleep_mib ?? 0 }
            : {},
          pinned: e.card.pin === true,
          priority: e.card.priority ?? 0,
        })),
        device!.totalMiB - device!.usedMiB,
      )
      : undefined;
    for (const e of on) {
      if (e.sleep?.woken_by !== "launcher" || !loads) continue;
      e.sleep.starts = loads.asleep.includes(e.name) ? "asleep" : "awake";
    }
    const free = known ? device!.totalMiB - device!.usedMiB : null;
    const each = on.filter((e) => e.need_mib !== null)
      .map((e) => `${e.name} ${e.need_mib} MiB, ${e.need_from}`);
    if (free !== null && need > free) {
      const parts = each.join("; ");
      unfit.push(
        `GPU ${entry}: its engines need ${need} MiB (${parts}), ${free} MiB free: they do not fit`,
      );
    }
    return {
      device: entry,
      total_mib: known ? device!.totalMiB : null,
      free_mib: free,
      engines: on,
      need_mib: known ? need : null,
      ...loads ? { left_mib: Math.floor(loads.leftMiB) } : {},
      holders: device
        ? listed.filter((p) => p.gpuUuid === device.uuid).map((p) => {
          const stat = live.get(p.pid);
          return {
            pid: p.pid,
            used_mib: p.usedMiB,
            process: stat === undefined
              ? "not visible here"
              : owners.get(stat.pgid) ?? stat.comm,
          };
        })
        : [],
      ...(device?.error ? { error: device.error } : {}),
    };
  });
  return {
    ok: true,
    directory: plan.directory,
    management_url: `${scheme}://${urlHost(plan.host)}:${plan.port}`,
    gpu_pool: gpuPoolLine(placement.detection),
    engines,
    gpus,
    warnings: [
      ...placement.detection.warning ? [placement.detection.warning] : [],
      ...plan.warnings,
      ...unfit,
    ],
  };
}

/** Each column's title and its cell. */
type Table<T> = readonly (readonly [string, (row: T) => string])[];

/** Those the status view shows too come in its order. */
const ENGINE_TABLE: Table<PlanEngine> = [
  ["MODEL", (e) => e.name],
  ["VERB", (e) => e.verb],
  ["ENGINE", (e) => e.engine],
  ["PORT", (e) => String(e.port)],
  ["GPUS", ({ gpus, share }) => {
    if (gpus === null) return "-";
    if (gpus.length === 0) return "none";
    const list = gpus.join(",");
    return share !== null && share < 1 ? `${list} (${share})` : list;
  }],
  ["WAITS FOR", (e) => e.waits_for.join(",") || "-"],
  ["URL", (e) => e.url],
  ["LOG", (e) => e.log],
];

export const PLAN_COLUMNS: readonly string[] = ENGINE_TABLE.map(([title]) =>
  title
);

const GPU_TABLE: Table<PlanGpu> = [
  ["GPU", (g) => g.device],
  ["TOTAL", (g) => mib(g.total_mib)],
  ["FREE", (g) => g.error ?? mib(g.free_mib)],
  [
    "ENGINES",
    (g) =>
      g.engines.map((e) => {
        const name = e.share < 1 ? `${e.name} ${e.share}` : e.name;
        const z = e.sleep;
        const kept = z?.asleep_mib == null
          ? "not measured"
          : `${mib(z.asleep_mib)}${z.asleep_from ? " estimated" : ""}`;
        const need = `${mib(e.need_mib)} ${needLabel(e.need_from)}`;
        const asleep =
          ` awake, ${kept} asleep after ${z?.after_seconds} s idle`;
        const woken = z?.woken_by === "launcher"
          ? `; launcher-woken, starts ${z.starts ?? "awake"}`
          : "";
        return `${name} (${need}${z ? asleep : ""}${woken})`;
      }).join(", ") || "-",
  ],
  ["THEY NEED", (g) => mib(g.need_mib)],
  ["LEFT", (g) => g.left_mib == null ? "-" : mib(g.left_mib)],
  [
    "HELD BY OTHERS",
    (g) =>
      g.holders.map((h) => `pid ${h.pid} (${h.process}, ${h.used_mib} MiB)`)
        .join("; ") || "-",
  ],
];

function table<T>(columns: Table<T>, rows: readonly T[]): string {
  return alignColumns(
    columns.map(([title]) => title),
    rows.map((row) => columns.map(([, cell]) => cell(row))),
  );
}

/** The plan for people, ending without a newline. */
export function renderPlan(plan: StartPlan): string {
  const out = [
    `Plan (dry run: nothing started): ${plan.engines.length} engine(s), management API ${plan.management_url}, root ${plan.directory}`,
    "",
    table(ENGINE_TABLE, plan.engines),
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
  if (plan.gpus.length > 0) out.push(table(GPU_TABLE, plan.gpus));
  out.push("");
  if (plan.warnings.length === 0) out.push("No warnings.");
  else {
    out.push(`Warnings (${plan.warnings.length}):`);
    for (const warning of plan.warnings) out.push(`  ${warning}`);
  }
  return out.join("\n");
}

function needLabel(from: string): string {
  return { g: "budget", m: "measured", e: "estimated" }[from[0]!] ??
    "not measured";
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
