/**
 * The status table: one row per engine from a `/models?detail=1` answer, and
 * its text, aligned like `docker ps`, times as people read them ("4m ago",
 * "in 3s"), coloured only when asked.
 *
 * Folder `status/`: the status view, a client of the management API. It
 * knows nothing of how engines are started or supervised: only the JSON the
 * launcher answers (`models_detail.ts`).
 *
 * @module
 */
import type {
  ModelsDetail,
  WireEngine,
  WireLastExit,
} from "./models_detail.ts";
import { alignColumns } from "../common/columns.ts";

/** One engine as the status view shows it; values as the launcher reported them. */
export interface StatusRow {
  /** The catalogue name. */
  model: string;
  /** What the model does, `-` when not reported. */
  verb: string;
  /** The lifecycle state (`starting`, `ready`, `waiting`, ...), `unknown` when not reported. */
  state: string;
  /** Why a `waiting` engine waits (`gpu-memory-free`), else null. */
  waitingFor: string | null;
  /** True when the engine's `/health` answered 200 during the request. */
  healthy: boolean;
  /** The engine process's pid, or null while none runs. */
  pid: number | null;
  /** Devices handed to the engine, `[]` for none, null when not placed or not reported. */
  gpus: readonly string[] | null;
  /** Restarts since the launcher started, or null when not reported. */
  restarts: number | null;
  /** ISO time of the last state change, or null. */
  since: string | null;
  /** How the last run ended, or null. */
  lastExit: WireLastExit | null;
  /** ISO time of the next start while in backoff, or null. */
  nextRestart: string | null;
  /** The engine's base URL. */
  url: string;
}

/** A duration in its largest whole unit: `45s`, `4m`, `3h`, `2d`. */
export function shortDuration(ms: number): string {
  const s = Math.floor(Math.abs(ms) / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

/**
 * An ISO time relative to `now`: `4m ago`, `in 3s`, `just now` within a
 * second either way; `-` for no time and the text itself when it is not a time.
 */
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

/** The column titles, in order. */
export const COLUMNS = [
  "MODEL",
  "VERB",
  "STATE",
  "HEALTHY",
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
    url: stringOr(engine.url, "-"),
  };
}

/** The rows of an answer, in the launcher's order (request order). */
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
  if (typeof exit.at === "string") parts.push(relativeTime(exit.at, now));
  return parts.join(", ");
}

/** The STATE cell: `waiting (gpu-memory-free)`, `backoff (restart in 4s)`, or the state. */
export function stateText(row: StatusRow, now: number): string {
  if (row.waitingFor !== null) return `${row.state} (${row.waitingFor})`;
  if (row.state === "backoff" && row.nextRestart !== null) {
    return `backoff (restart ${relativeTime(row.nextRestart, now)})`;
  }
  return row.state;
}

/** The cells of one row, as plain text. */
function cells(row: StatusRow, now: number): string[] {
  return [
    row.model,
    row.verb,
    stateText(row, now),
    row.healthy ? "yes" : "no",
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
  ];
}

const GREEN = "\x1b[32m";
const YELLOW = "\x1b[33m";
const RED = "\x1b[31m";
const BOLD = "\x1b[1m";

function stateColour(state: string): string {
  if (state === "ready") return GREEN;
  if (state === "unhealthy" || state === "exited") return RED;
  return YELLOW;
}

/** How to render the table. */
export interface RenderOptions {
  /** Now, in epoch milliseconds, for the relative times. */
  now: number;
  /** ANSI colours for the title, STATE and HEALTHY. @default {false} */
  color?: boolean;
}

/**
 * The table as text, one line per engine under a title line, columns padded
 * to their widest cell and separated by three spaces; no trailing spaces.
 */
export function renderTable(
  rows: readonly StatusRow[],
  options: RenderOptions,
): string {
  const color = options.color === true;
  return alignColumns(
    COLUMNS,
    rows.map((row) => cells(row, options.now)),
    (r, i) => {
      if (!color) return "";
      if (r < 0) return BOLD;
      const row = rows[r]!;
      if (i === 2) return stateColour(row.state);
      if (i === 3) return row.healthy ? GREEN : RED;
      return "";
    },
  );
}
