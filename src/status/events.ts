/**
 * `status --events`: the launcher's journal (`<directory>/logs/events.jsonl`,
 * rotated files first) printed for people, newest last, or its lines passed
 * through (`--json`); `--follow` keeps printing what is appended.
 *
 * @module
 */
import { printable } from "../common/printable.ts";
import { sleep } from "../common/sleep.ts";

export interface EventsOptions {
  directory: string;
  /** This model's events and the launcher's own. */
  model?: string;
  /** Epoch milliseconds. */
  since?: number;
  json?: boolean;
  /** Until `signal` aborts. */
  follow?: boolean;
  signal?: AbortSignal;
  print?: (line: string) => void;
}

const FOLLOW_POLL_MS = 500;

/** `30m`, `2h`, `45s`, `1d` as milliseconds. */
export function durationMs(text: string): number | undefined {
  const m = /^(\d+(?:\.\d+)?)([smhd])$/.exec(text.trim());
  if (!m) return undefined;
  const unit = { s: 1e3, m: 6e4, h: 3.6e6, d: 8.64e7 }[m[2] as "s"];
  return Number(m[1]) * unit;
}

/** `08:40:01.123  tiny  backoff → failed  (bad-arguments)  exit: code 1 …` */
export function eventText(line: string): string | undefined {
  let e;
  try {
    e = JSON.parse(line);
  } catch {
    return undefined;
  }
  if (typeof e !== "object" || e === null || typeof e.at !== "string") {
    return undefined;
  }
  const what = e.from || e.to ? `${e.from ?? "-"} → ${e.to ?? "-"}` : e.event;
  // A journal may come from elsewhere: its text must not drive the terminal.
  return printable(
    [
      e.at.replace("T", " ").replace("Z", ""),
      e.model ?? "launcher",
      what,
      e.reason ? `(${e.reason})` : "",
      e.detail ?? "",
    ].filter((part) => part !== "").join("  "),
  );
}

/** The line as written, but DEL and C1 (valid raw in JSON strings) escaped: the same JSON value. */
export function escapedJson(line: string): string {
  return line.replace(
    /[\x7f-\x9f]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/** 1 when the directory has no journal. */
export async function showEvents(options: EventsOptions): Promise<number> {
  const path = `${options.directory}/logs/events.jsonl`;
  const print = options.print ?? console.log;
  const rotated = [];
  for (let n = 1;; n++) {
    try {
      Deno.statSync(`${path}.${n}`);
      rotated.unshift(`${path}.${n}`);
    } catch {
      break;
    }
  }
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch {
    if (rotated.length === 0) {
      console.error(`no journal at ${path} (has a launcher run there?)`);
      return 1;
    }
    text = "";
  }
  const show = (line: string) => {
    if (line === "") return;
    let e;
    try {
      e = JSON.parse(line);
    } catch {
      return;
    }
    if (
      options.model !== undefined && e.model !== null &&
      e.model !== options.model
    ) return;
    if (options.since !== undefined && Date.parse(e.at) < options.since) return;
    const out = options.json ? escapedJson(line) : eventText(line);
    if (out !== undefined) print(out);
  };
  for (const file of rotated) {
    for (const line of Deno.readTextFileSync(file).split("\n")) show(line);
  }
  const lines = text.split("\n");
  let offset = new TextEncoder().encode(text).length;
  for (const line of lines) show(line);
  while (options.follow && !options.signal?.aborted) {
    await sleep(FOLLOW_POLL_MS, options.signal);
    let size: number;
    try {
      size = Deno.statSync(path).size;
    } catch {
      continue;
    }
    // Rotated meanwhile: the new file is read from its start.
    if (size < offset) offset = 0;
    if (size === offset) continue;
    using file = Deno.openSync(path);
    file.seekSync(offset, Deno.SeekMode.Start);
    const bytes = new Uint8Array(size - offset);
    const read = file.readSync(bytes) ?? 0;
    const chunk = new TextDecoder().decode(bytes.subarray(0, read));
    // Only whole lines; a line still being written waits for the next round.
    const end = chunk.lastIndexOf("\n") + 1;
    offset += new TextEncoder().encode(chunk.slice(0, end)).length;
    for (const line of chunk.slice(0, end).split("\n")) show(line);
  }
  return 0;
}
