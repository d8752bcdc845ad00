import { alignColumns } from "../common/columns.ts";
import { cutToWidth, displayWidth } from "../common/display_width.ts";
import { printable } from "../common/printable.ts";

export type Json = Record<string, unknown>;

/** Engines by catalogue name, in request order. */
export interface ModelsDetail {
  active: Record<string, Json>;
  [extra: string]: unknown;
}

export interface StatusRow {
  model: string;
  engine: Json;
}

// The answer is untrusted JSON (another version of the launcher, or something
// else): each column uses a field only when it has the expected type.
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
  const time = shortDuration(delta);
  return delta > 0 ? `${time} ago` : `in ${time}`;
}

export function rowsOf(detail: ModelsDetail): StatusRow[] {
  return Object.entries(detail.active).map(([model, engine]) => ({
    model,
    engine: obj(engine) ?? {},
  }));
}

export function healthy({ engine }: StatusRow): boolean {
  return engine.healthy === true;
}

/** `code 3, 2m ago`, `signal SIGKILL, 5s ago`, `unhealthy, signal SIGTERM, 1h ago`, or `-`. */
export function lastExitText(value: unknown, now: number): string {
  const exit = obj(value);
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
  const big = Math.max(done, of ?? 0) >= 1e9;
  const gb = (n: number) => (n / 1e9).toFixed(1).replace(/\.0$/, "");
  const size = (n: number) => big ? gb(n) : String(Math.round(n / 1e6));
  const u = big ? "GB" : "MB";
  return of === null ? `${size(done)} ${u}` : `${size(done)}/${size(of)} ${u}`;
}

/** The STATE cell: `waiting (gpu-memory-free)`, `backoff (restart in 4s)`, or the state. */
export function stateText({ engine }: StatusRow, now: number): string {
  const state = text(engine.state) ?? "unknown";
  const waiting = obj(engine.waiting_for);
  if (waiting) return `${state} (${text(waiting.reason) ?? "unknown"})`;
  const phase = text(engine.phase);
  if (state === "starting" && phase !== null) {
    const progress = obj(engine.progress);
    const done = progress ? progressText(progress) : "";
    const since = text(engine.phase_since);
    const ago = since === null
      ? ""
      : `, ${shortDuration(now - Date.parse(since))}`;
    return `starting (${phase}${done ? ` ${done}` : ""}${ago})`;
  }
  const drain = obj(engine.drain);
  const deadline = text(drain?.deadline);
  if (state === "draining" && deadline !== null) {
    // In flight at the last read (null before it).
    const running = num(drain?.running);
    const inFlight = running === null
      ? ""
      : `${running + (num(drain?.waiting) ?? 0)} in flight, `;
    const at = relativeTime(deadline, now);
    return `draining (${inFlight}SIGTERM ${at} at most)`;
  }
  // What a launcher's wake waits for, its kind only: `room on GPU 0`.
  const waits = text(obj(engine.sleep)?.waits_for)?.split(":")[0];
  if (state === "waking" && waits) return `waking (${waits})`;
  const next = text(engine.next_restart);
  if (state === "backoff" && next !== null) {
    return `backoff (restart ${relativeTime(next, now)})`;
  }
  return state;
}

const GREEN = "\x1b[32m";
const YELLOW = "\x1b[33m";
const RED = "\x1b[31m";
const BOLD = "\x1b[1m";

type Column = readonly [
  title: string,
  cell: (row: StatusRow, now: number) => string,
  colour?: (row: StatusRow) => string,
];

const TABLE: readonly Column[] = [
  ["MODEL", (row) => row.model],
  ["VERB", ({ engine }) => text(engine.verb) ?? "-"],
  ["STATE", stateText, ({ engine }) => {
    const state = text(engine.state);
    if (state === "ready") return GREEN;
    return ["unhealthy", "exited", "failed"].includes(state!) ? RED : YELLOW;
  }],
  [
    "HEALTHY",
    (row) => healthy(row) ? "yes" : "no",
    (row) => healthy(row) ? GREEN : RED,
  ],
  ["REQ", ({ engine }) => {
    const traffic = obj(engine.traffic);
    const running = num(traffic?.running);
    const waiting = num(traffic?.waiting) ?? 0;
    if (running === null) return "-";
    return waiting > 0 ? `${running}+${waiting}` : String(running);
  }],
  ["TOK/S", ({ engine }) => {
    const traffic = obj(engine.traffic);
    const rate = num(traffic?.tokens_per_s);
    if (rate === null || num(traffic?.running) === null) return "-";
    return rate >= 100 ? String(Math.round(rate)) : rate.toFixed(1);
  }],
  ["PID", ({ engine }) => String(num(engine.pid) ?? "-")],
  ["GPUS", ({ engine: { gpus } }) => {
    // `[]` for none, null when not placed.
    if (!Array.isArray(gpus)) return "-";
    return gpus.length === 0 ? "none" : gpus.map(String).join(",");
  }],
  ["MEM", ({ engine }) => {
    // MiB: `162M` below 10G, then `12.3G`; asleep, what it keeps.
    const kept = ["sleeping", "waking"].includes(String(engine.state))
      ? num(obj(engine.sleep)?.residue_bytes)
      : null;
    const mib = kept === null
      ? num(obj(engine.footprint)?.total_mib)
      : kept / 2 ** 20;
    if (mib === null) return "-";
    return mib < 10240 ? `${Math.round(mib)}M` : `${(mib / 1024).toFixed(1)}G`;
  }],
  ["RESTARTS", ({ engine }) => String(num(engine.restarts) ?? "-")],
  ["SINCE", ({ engine }, now) => relativeTime(text(engine.since), now)],
  ["LAST EXIT", ({ engine }, now) => lastExitText(engine.last_exit, now)],
  ["URL", ({ engine }) => text(engine.url) ?? "-"],
];

export const COLUMNS: readonly string[] = TABLE.map(([title]) => title);

/** Engine text may carry escapes (a retitle, a clipboard write, a faked line). */
export function cellsOf(row: StatusRow, now: number): string[] {
  return TABLE.map(([, cell]) => printable(cell(row, now)));
}

// Until a row fits: the free text cut in this order down to these widths and
// the gaps narrowed to 2, each only as far as needed.
const CUTS: readonly (readonly [string, number])[] = [
  ["LAST EXIT", 9],
  ["STATE", 12],
  ["gap", 2],
  ["STATE", 9],
];

// Lost first to last by a terminal too narrow for the cut row (`--json` has
// them all); MODEL, the row's identity, and STATE stay.
export const DROPS: readonly string[] =
  "URL,PID,GPUS,MEM,VERB,RESTARTS,SINCE,TOK/S,REQ,LAST EXIT,HEALTHY".split(",");

function rowWidth(widths: readonly number[], gap: number): number {
  return widths.reduce((a, b) => a + b, gap * (widths.length - 1));
}

/** The fewest columns to drop, then the least to cut, for rows to fit `width`. */
function fit(natural: readonly number[], width: number) {
  let shown: number[] = [];
  for (let dropped = 0; dropped <= DROPS.length; dropped++) {
    const gone = DROPS.slice(0, dropped);
    shown = COLUMNS.flatMap((title, i) => gone.includes(title) ? [] : [i]);
    const cuts = (i: number) =>
      CUTS.filter(([title]) => title === COLUMNS[i]).map(([, floor]) => floor);
    const floors = shown.map((i) => Math.min(natural[i]!, ...cuts(i)));
    if (rowWidth(floors, 2) <= width) break;
  }
  const widths = shown.map((i) => natural[i]!);
  let gap = 3;
  for (const [title, floor] of CUTS) {
    const over = rowWidth(widths, gap) - width;
    if (over <= 0) break;
    const at = shown.indexOf(COLUMNS.indexOf(title));
    if (title === "gap") gap = floor;
    else if (at >= 0) {
      widths[at] = Math.max(Math.min(widths[at]!, floor), widths[at]! - over);
    }
  }
  return { shown, widths, gap };
}

/** Aligned like `docker ps`; `width` (terminal columns) cuts and drops columns so each line fits it. */
export function renderTable(
  rows: readonly StatusRow[],
  options: { now: number; color?: boolean; width?: number | undefined },
): string {
  const cells = rows.map((row) => cellsOf(row, options.now));
  const natural = COLUMNS.map((title, i) =>
    Math.max(title.length, ...cells.map((line) => displayWidth(line[i]!)))
  );
  const { shown, widths, gap } = fit(natural, options.width ?? Infinity);
  const fitted = cells.map((line) =>
    shown.map((i, at) => cutToWidth(line[i]!, widths[at]!))
  );
  return alignColumns(shown.map((i) => COLUMNS[i]!), fitted, (r, at) => {
    if (options.color !== true) return "";
    if (r < 0) return BOLD;
    return TABLE[shown[at]!]![2]?.(rows[r]!) ?? "";
  }, gap);
}
