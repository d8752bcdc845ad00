/**
 * The status table over `GET /models?detail=1`: one row per engine, times as
 * people read them ("4m ago", "in 3s"), coloured only when asked. The answer
 * is read as untrusted JSON (another version of the launcher, or something
 * else): each field is used only when it has the expected type.
 *
 * @module
 */
import { alignColumns } from "../common/columns.ts";
import { printable } from "../common/printable.ts";

/** A JSON object as received; unknown fields are kept (and shown by `--json`). */
export type Json = Record<string, unknown>;

/** The answer: engines by catalogue name, in request order. */
export interface ModelsDetail {
  active: Record<string, Json>;
  [extra: string]: unknown;
}

/** One engine as the launcher reported it (`-`, `unknown` or null where it did not). */
export type StatusRow = ReturnType<typeof rowOf>;

function text(value: unknown): string | null {
  return typeof value === "string" ? value : null;
}

function num(value: unknown): number | null {
  return typeof value === "number" ? value : null;
}

function obj(value: unknown): Json | null {
  return typeof value === "object" && value !== null ? value as Json : null;
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
export function relativeTime(iso: string | null, now: number): string {
  if (!iso) return "-";
  const at = Date.parse(iso);
  if (Number.isNaN(at)) return iso;
  const delta = now - at;
  if (Math.abs(delta) < 1000) return "just now";
  return delta > 0
    ? `${shortDuration(delta)} ago`
    : `in ${shortDuration(delta)}`;
}

function rowOf(model: string, engine: Json) {
  const waiting = obj(engine.waiting_for);
  const phase = text(engine.phase);
  const traffic = obj(engine.traffic);
  const running = num(traffic?.running);
  const drain = obj(engine.drain);
  const deadline = text(drain?.deadline);
  const drained = num(drain?.running);
  return {
    model,
    verb: text(engine.verb) ?? "-",
    state: text(engine.state) ?? "unknown",
    // Why a `waiting` engine waits (`gpu-memory-free`).
    waitingFor: waiting && (text(waiting.reason) ?? "unknown"),
    healthy: engine.healthy === true,
    pid: num(engine.pid),
    // `[]` for none, null when not placed.
    gpus: Array.isArray(engine.gpus) ? engine.gpus.map(String) : null,
    restarts: num(engine.restarts),
    since: text(engine.since),
    lastExit: obj(engine.last_exit),
    nextRestart: text(engine.next_restart),
    ...(phase === null ? {} : {
      load: {
        phase,
        since: text(engine.phase_since),
        progress: obj(engine.progress),
      },
    }),
    url: text(engine.url) ?? "-",
    ...(running === null ? {} : {
      traffic: {
        running,
        waiting: num(traffic?.waiting) ?? 0,
        tokensPerS: num(traffic?.tokens_per_s),
      },
    }),
    // In flight at the last read (null before it), and the SIGTERM deadline.
    ...(deadline === null ? {} : {
      drain: {
        inFlight: drained === null
          ? null
          : drained + (num(drain?.waiting) ?? 0),
        deadline,
      },
    }),
  };
}

/** In request order. */
export function rowsOf(detail: ModelsDetail): StatusRow[] {
  return Object.entries(detail.active).map(([model, engine]) =>
    rowOf(model, obj(engine) ?? {})
  );
}

/** `code 3, 2m ago`, `signal SIGKILL, 5s ago`, `unhealthy, signal SIGTERM, 1h ago`, or `-`. */
export function lastExitText(exit: Json | null, now: number): string {
  if (exit === null) return "-";
  const cause = text(exit.cause);
  const at = text(exit.at);
  const message = text(exit.message);
  const parts = [
    exit.reason === "unhealthy" ? "unhealthy" : null,
    typeof exit.code === "number"
      ? `code ${exit.code}`
      : typeof exit.signal === "string"
      ? `signal ${exit.signal}`
      : "ended",
    // `exit` and `signal` say nothing the code or signal does not.
    cause === "exit" || cause === "signal" ? null : cause,
    at === null ? null : relativeTime(at, now),
  ].filter((part) => part !== null).join(", ");
  return message === null ? parts : `${parts}: ${message}`;
}

/** `9/20`, `3.1/16 GB`, `3.1 GB`, `29 MB`: a phase's progress for people. */
function progressText(progress: Json): string {
  const done = num(progress.done);
  if (done === null) return "";
  const of = num(progress.total);
  if (progress.unit !== "bytes") {
    return of === null ? `${done}` : `${done}/${of}`;
  }
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

const GREEN = "\x1b[32m";
const YELLOW = "\x1b[33m";
const RED = "\x1b[31m";
const BOLD = "\x1b[1m";

/** A column: its title, its cell, and its colour when colours are asked. */
type Column = readonly [
  title: string,
  cell: (row: StatusRow, now: number) => string,
  colour?: (row: StatusRow) => string,
];

const TABLE: readonly Column[] = [
  ["MODEL", (row) => row.model],
  ["VERB", (row) => row.verb],
  [
    "STATE",
    stateText,
    (row) =>
      row.state === "ready"
        ? GREEN
        : ["unhealthy", "exited", "failed"].includes(row.state)
        ? RED
        : YELLOW,
  ],
  [
    "HEALTHY",
    (row) => row.healthy ? "yes" : "no",
    (row) => row.healthy ? GREEN : RED,
  ],
  // Running, `+N` waiting.
  [
    "REQ",
    ({ traffic: t }) =>
      t === undefined
        ? "-"
        : t.waiting > 0
        ? `${t.running}+${t.waiting}`
        : String(t.running),
  ],
  // Whole from 100, else one decimal.
  ["TOK/S", ({ traffic }) => {
    const rate = traffic?.tokensPerS ?? null;
    if (rate === null) return "-";
    return rate >= 100 ? String(Math.round(rate)) : rate.toFixed(1);
  }],
  ["PID", (row) => String(row.pid ?? "-")],
  [
    "GPUS",
    ({ gpus }) =>
      gpus === null ? "-" : gpus.length === 0 ? "none" : gpus.join(","),
  ],
  ["RESTARTS", (row) => String(row.restarts ?? "-")],
  ["SINCE", (row, now) => relativeTime(row.since, now)],
  ["LAST EXIT", (row, now) => lastExitText(row.lastExit, now)],
  ["URL", (row) => row.url],
];

export const COLUMNS: readonly string[] = TABLE.map(([title]) => title);

// The free-text columns, cut in this order down to these widths; then the
// gaps narrow to 2; then the cuts go further. A 100-column terminal holds a
// row this way; `--wide` shows it whole.
type Cuts = readonly (readonly [string, number])[];
const CUTS: Cuts = [
  ["LAST EXIT", 9],
  ["URL", 12],
  ["STATE", 12],
  ["MODEL", 12],
];
const LAST_CUTS: Cuts = [
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
  const cut = (cuts: Cuts) => {
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

/** How to render the table. */
export interface RenderOptions {
  /** Epoch milliseconds, for the relative times. */
  now: number;
  /** ANSI colours for the title, STATE and HEALTHY. */
  color?: boolean;
  /** Cut the free-text columns with `…` so each line fits this many columns; unset: whole rows. */
  width?: number | undefined;
}

/** The table as text, aligned like `docker ps`: one title line and one line per engine. */
export function renderTable(
  rows: readonly StatusRow[],
  options: RenderOptions,
): string {
  // Engine text may carry escapes (a retitle, a clipboard write, a faked line).
  const all = rows.map((row) =>
    TABLE.map(([, cell]) => printable(cell(row, options.now)))
  );
  const fit = options.width === undefined
    ? { rows: all, gap: 3 }
    : fitCells(all, options.width);
  return alignColumns(COLUMNS, fit.rows, (r, i) => {
    if (options.color !== true) return "";
    if (r < 0) return BOLD;
    return TABLE[i]![2]?.(rows[r]!) ?? "";
  }, fit.gap);
}
