/**
 * The status table: one row per engine, times as people read them ("4m ago",
 * "in 3s"), coloured only when asked.
 *
 * @module
 */
import type {
  ModelsDetail,
  WireEngine,
  WireLastExit,
  WireProgress,
  WireTraffic,
} from "./models_detail.ts";
import { alignColumns } from "../common/columns.ts";
import { printable } from "../common/printable.ts";

/** One engine as the launcher reported it (`-`, `unknown` or null where it did not). */
export interface StatusRow {
  /** The catalogue name. */
  model: string;
  /** What the model does. */
  verb: string;
  /** The lifecycle state. */
  state: string;
  /** Why a `waiting` engine waits (`gpu-memory-free`). */
  waitingFor: string | null;
  /** The engine answered `/health` during the request. */
  healthy: boolean;
  /** The engine's pid. */
  pid: number | null;
  /** `[]` for none, null when not placed. */
  gpus: readonly string[] | null;
  /** Since the launcher started. */
  restarts: number | null;
  /** The last state change. */
  since: string | null;
  /** How the last run ended. */
  lastExit: WireLastExit | null;
  /** The next start, in backoff. */
  nextRestart: string | null;
  /** While starting: the load phase, its start and progress. */
  load?: {
    phase: string;
    since: string | null;
    progress: WireProgress | null;
  };
  /** While `draining`: requests in flight at its last read (null before it), and its deadline. */
  drain?: { inFlight: number | null; deadline: string };
  /** The engine's base URL. */
  url: string;
  /** Read from the engine's own metrics, when the launcher reports it. */
  traffic?: {
    running: number;
    waiting: number;
    /** Null while unknown. */
    tokensPerS: number | null;
  };
}

/** A duration in its largest whole unit: `45s`, `4m`, `3h`, `2d`. */
export function shortDuration(ms: number): string {
  const s = Math.floor(Math.abs(ms) / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

/** `4m ago`, `in 3s`, `just now` within a second; `-` for none, the text itself when not a time. */
export function relativeTime(
  iso: string | null | undefined,
  now: number,
): string {
  if (iso === null || iso === undefined || iso === "") return "-";
  const at = Date.parse(iso);
  if (Number.isNaN(at)) return iso;
  const delta = now - at;
  if (Math.abs(delta) < 1000) return "just now";
  return delta > 0
    ? `${shortDuration(delta)} ago`
    : `in ${shortDuration(delta)}`;
}

export const COLUMNS = [
  "MODEL",
  "VERB",
  "STATE",
  "HEALTHY",
  "REQ",
  "TOK/S",
  "PID",
  "GPUS",
  "RESTARTS",
  "SINCE",
  "LAST EXIT",
  "URL",
] as const;

function stringOr<T>(value: unknown, fallback: T): string | T {
  return typeof value === "string" ? value : fallback;
}

function rowOf(model: string, engine: WireEngine): StatusRow {
  const waiting = engine.waiting_for;
  return {
    model,
    verb: stringOr(engine.verb, "-"),
    state: stringOr(engine.state, "unknown"),
    waitingFor: waiting && typeof waiting === "object"
      ? stringOr(waiting.reason, "unknown")
      : null,
    healthy: engine.healthy === true,
    pid: typeof engine.pid === "number" ? engine.pid : null,
    gpus: Array.isArray(engine.gpus) ? engine.gpus.map(String) : null,
    restarts: typeof engine.restarts === "number" ? engine.restarts : null,
    since: stringOr(engine.since, null),
    lastExit: engine.last_exit && typeof engine.last_exit === "object"
      ? engine.last_exit
      : null,
    nextRestart: stringOr(engine.next_restart, null),
    ...(typeof engine.phase === "string"
      ? {
        load: {
          phase: engine.phase,
          since: stringOr(engine.phase_since, null),
          progress: engine.progress && typeof engine.progress === "object"
            ? engine.progress
            : null,
        },
      }
      : {}),
    url: stringOr(engine.url, "-"),
    ...trafficOf(engine.traffic),
    ...drainOf(engine.drain),
  };
}

function drainOf(drain: unknown): Pick<StatusRow, "drain"> {
  if (typeof drain !== "object" || drain === null) return {};
  const { running, waiting, deadline } = drain as Record<string, unknown>;
  if (typeof deadline !== "string") return {};
  const inFlight = typeof running === "number"
    ? running + (typeof waiting === "number" ? waiting : 0)
    : null;
  return { drain: { inFlight, deadline } };
}

function trafficOf(traffic: unknown): Pick<StatusRow, "traffic"> {
  if (typeof traffic !== "object" || traffic === null) return {};
  const { running, waiting, tokens_per_s: rate } = traffic as WireTraffic;
  if (typeof running !== "number") return {};
  return {
    traffic: {
      running,
      waiting: typeof waiting === "number" ? waiting : 0,
      tokensPerS: typeof rate === "number" ? rate : null,
    },
  };
}

/** In request order. */
export function rowsOf(detail: ModelsDetail): StatusRow[] {
  return Object.entries(detail.active).map(([model, engine]) =>
    rowOf(model, engine ?? {})
  );
}

/** `code 3, 2m ago`, `signal SIGKILL, 5s ago`, `unhealthy, signal SIGTERM, 1h ago`, or `-`. */
export function lastExitText(exit: WireLastExit | null, now: number): string {
  if (exit === null) return "-";
  const how = typeof exit.code === "number"
    ? `code ${exit.code}`
    : typeof exit.signal === "string"
    ? `signal ${exit.signal}`
    : "ended";
  const parts = exit.reason === "unhealthy" ? ["unhealthy", how] : [how];
  // `exit` and `signal` say nothing the code or signal does not.
  if (
    typeof exit.cause === "string" && !["exit", "signal"].includes(exit.cause)
  ) {
    parts.push(exit.cause);
  }
  if (typeof exit.at === "string") parts.push(relativeTime(exit.at, now));
  const text = parts.join(", ");
  return typeof exit.message === "string" ? `${text}: ${exit.message}` : text;
}

/** `9/20`, `3.1/16 GB`, `3.1 GB`, `29 MB`: a phase's progress for people. */
function progressText(progress: WireProgress): string {
  const { done, total, unit } = progress;
  if (typeof done !== "number") return "";
  const of = typeof total === "number" ? total : null;
  if (unit !== "bytes") return of === null ? `${done}` : `${done}/${of}`;
  // GB with one decimal once it reaches a GB, else whole MB.
  const big = Math.max(done, of ?? 0) >= 1e9;
  const size = (n: number) =>
    big
      ? (n / 1e9).toFixed(1).replace(/\.0$/, "")
      : String(Math.round(n / 1e6));
  const u = big ? "GB" : "MB";
  return of === null ? `${size(done)} ${u}` : `${size(done)}/${size(of)} ${u}`;
}

/** The STATE cell: `waiting (gpu-memory-free)`, `backoff (restart in 4s)`, or the state. */
export function stateText(row: StatusRow, now: number): string {
  if (row.waitingFor !== null) return `${row.state} (${row.waitingFor})`;
  if (row.state === "starting" && row.load) {
    const { phase, since, progress } = row.load;
    const done = progress ? progressText(progress) : "";
    const ago = since === null
      ? ""
      : `, ${shortDuration(now - Date.parse(since))}`;
    return `starting (${phase}${done ? ` ${done}` : ""}${ago})`;
  }
  if (row.state === "draining" && row.drain) {
    const n = row.drain.inFlight;
    const left = `SIGTERM ${relativeTime(row.drain.deadline, now)} at most`;
    return `draining (${n === null ? "" : `${n} in flight, `}${left})`;
  }
  if (row.state === "backoff" && row.nextRestart !== null) {
    return `backoff (restart ${relativeTime(row.nextRestart, now)})`;
  }
  return row.state;
}

// Engine text may carry escapes (a retitle, a clipboard write, a faked line).
function cells(row: StatusRow, now: number): string[] {
  return [
    row.model,
    row.verb,
    stateText(row, now),
    row.healthy ? "yes" : "no",
    ...trafficCells(row),
    row.pid === null ? "-" : String(row.pid),
    row.gpus === null
      ? "-"
      : row.gpus.length === 0
      ? "none"
      : row.gpus.join(","),
    row.restarts === null ? "-" : String(row.restarts),
    relativeTime(row.since, now),
    lastExitText(row.lastExit, now),
    row.url,
  ].map(printable);
}

/** REQ: running, `+N` waiting; TOK/S: whole from 100, else one decimal; `-` unknown. */
function trafficCells(row: StatusRow): [string, string] {
  const t = row.traffic;
  if (t === undefined) return ["-", "-"];
  const rate = t.tokensPerS;
  return [
    t.waiting > 0 ? `${t.running}+${t.waiting}` : String(t.running),
    rate === null
      ? "-"
      : rate >= 100
      ? String(Math.round(rate))
      : rate.toFixed(1),
  ];
}

// The free-text columns, cut in this order down to these widths; then the
// gaps narrow to 2; then the cuts go further. A 100-column terminal holds a
// row this way; `--wide` shows it whole.
const CUTS: readonly (readonly [typeof COLUMNS[number], number])[] = [
  ["LAST EXIT", 9],
  ["URL", 12],
  ["STATE", 12],
  ["MODEL", 12],
];
const LAST_CUTS: readonly (readonly [typeof COLUMNS[number], number])[] = [
  ["MODEL", 9],
  ["STATE", 9],
  ["URL", 3],
  ["STATE", 5],
  ["MODEL", 5],
];

/** The cells cut with `…`, and the gap, so that each line fits `width` as far as the cuts allow. */
function fitCells(
  rows: string[][],
  width: number,
): { rows: string[][]; gap: number } {
  const widths = COLUMNS.map((title, i) =>
    Math.max(title.length, ...rows.map((cells) => cells[i]!.length))
  );
  let gap = 3;
  const over = () =>
    widths.reduce((a, b) => a + b, 0) + gap * (widths.length - 1) - width;
  const cut = (cuts: typeof CUTS) => {
    for (const [title, floor] of cuts) {
      const i = COLUMNS.indexOf(title);
      widths[i] = Math.max(Math.min(widths[i]!, floor), widths[i]! - over());
    }
  };
  cut(CUTS);
  if (over() > 0) gap = 2;
  if (over() > 0) cut(LAST_CUTS);
  return {
    gap,
    rows: rows.map((cells) =>
      cells.map((text, i) =>
        text.length > widths[i]! ? `${text.slice(0, widths[i]! - 1)}…` : text
      )
    ),
  };
}

const GREEN = "\x1b[32m";
const YELLOW = "\x1b[33m";
const RED = "\x1b[31m";
const BOLD = "\x1b[1m";

function stateColour(state: string): string {
  if (state === "ready") return GREEN;
  if (state === "unhealthy" || state === "exited" || state === "failed") {
    return RED;
  }
  return YELLOW;
}

/** How to render the table. */
export interface RenderOptions {
  /** Epoch milliseconds, for the relative times. */
  now: number;
  /** ANSI colours for the title, STATE and HEALTHY. @default {false} */
  color?: boolean;
  /** Cut the free-text columns with `…` so each line fits this many columns (a terminal's); unset: whole rows. */
  width?: number;
}

/**
 * The table as text, aligned like `docker ps`.
 *
 * @param rows The rows.
 * @param options The time and colours.
 * @returns One title line and one line per engine.
 *
 * @example
 * ```ts
 * import { renderTable } from "@mymodel/serve/status";
 * console.log(renderTable([], { now: Date.now() })); // the title line alone
 * ```
 */
export function renderTable(
  rows: readonly StatusRow[],
  options: RenderOptions,
): string {
  const color = options.color === true;
  const all = rows.map((row) => cells(row, options.now));
  const fit = options.width === undefined
    ? { rows: all, gap: 3 }
    : fitCells(all, options.width);
  return alignColumns(
    COLUMNS,
    fit.rows,
    (r, i) => {
      if (!color) return "";
      if (r < 0) return BOLD;
      const row = rows[r]!;
      if (i === 2) return stateColour(row.state);
      if (i === 3) return row.healthy ? GREEN : RED;
      return "";
    },
    fit.gap,
  );
}
