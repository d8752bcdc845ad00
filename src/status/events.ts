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
  model?: string | undefined;
  /** Epoch milliseconds. */
  since?: number | undefined;
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

/** A journal line from anywhere: its fields are checked where read. */
function parsed(line: string) {
  try {
    return JSON.parse(line);
  } catch {
    return undefined;
  }
}

/** `08:40:01.123  tiny  backoff → failed  (bad-arguments)  exit: code 1 …` */
export function eventText(line: string): string | undefined {
  const e = parsed(line);
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
  const show = (line: string) => {
    const e = parsed(line);
    if (e === undefined) return;
    if (
      options.model !== undefined && e.model !== null &&
      e.model !== options.model
    ) return;
    if (options.since !== undefined && Date.parse(e.at) < options.since) return;
    const out = options.json ? escapedJson(line) : eventText(line);
    if (out !== undefined) print(out);
  };
  const rotated = rotatedFiles(path);
  // Without a journal file, the newest rotated one anchors a follow.
  let current = openJournal(path) ?? rotated.pop();
  if (current === undefined) {
    console.error(`no journal at ${path} (has a launcher run there?)`);
    return 1;
  }
  for (const file of rotated) {
    try {
      complete(file, show);
    } finally {
      file.file.close();
    }
  }
  try {
    readLines(current, show);
    while (options.follow && !options.signal?.aborted) {
      await sleep(FOLLOW_POLL_MS, options.signal);
      readLines(current, show);
      if (!rotatedAway(path, current)) continue;
      // Rotated, maybe more than once since the last look: the file held is
      // finished by its handle, then those rotated after it, then the new one.
      const since = rotatedFiles(path, current);
      complete(current, show);
      for (const file of since) complete(file, show);
      const newest = openJournal(path) ?? since.pop();
      for (const file of since) file.file.close();
      // The journal not yet written again: the file held stays the anchor.
      if (newest === undefined) continue;
      current.file.close();
      current = newest;
      readLines(current, show);
    }
    complete(current, show);
  } finally {
    current.file.close();
  }
  return 0;
}

/** An open journal file, read up to `offset`; `rest` is a line still being written. */
interface Followed {
  file: Deno.FsFile;
  info: Deno.FileInfo;
  offset: number;
  rest: Uint8Array;
}

/** Only a regular file: a FIFO's open would block. */
function openJournal(path: string): Followed | undefined {
  let file: Deno.FsFile;
  try {
    if (!Deno.statSync(path).isFile) return undefined;
    file = Deno.openSync(path);
  } catch {
    return undefined;
  }
  return { file, info: file.statSync(), offset: 0, rest: new Uint8Array() };
}

function sameFile(a: Deno.FileInfo, b: Deno.FileInfo): boolean {
  return a.ino === b.ino && a.dev === b.dev;
}

/** Renamed or removed. Without inodes (Windows), a journal shorter than what was read is a new one. */
function rotatedAway(path: string, held: Followed): boolean {
  let info: Deno.FileInfo;
  try {
    info = Deno.statSync(path);
  } catch {
    return held.info.ino !== null;
  }
  return held.info.ino === null
    ? info.size < held.offset
    : !sameFile(info, held.info);
}

/** `path.1`, `path.2`… oldest first: all of them, or those newer than `held`. */
function rotatedFiles(path: string, held?: Followed): Followed[] {
  const files: Followed[] = [];
  // Without inodes, the file held cannot be told among the rotated ones.
  if (held?.info.ino === null) return files;
  for (let n = 1;; n++) {
    const file = openJournal(`${path}.${n}`);
    if (file === undefined) break;
    if (held && sameFile(file.info, held.info)) {
      file.file.close();
      break;
    }
    files.unshift(file);
  }
  return files;
}

const CHUNK = 64 * 1024;
// A journal from elsewhere may hold no line break at all: no unbounded line.
const MAX_LINE_BYTES = 1024 * 1024;
const decoder = new TextDecoder();

/** Whole lines only; a line still being written waits for the next look. */
function readLines(held: Followed, show: (line: string) => void): void {
  const buffer = new Uint8Array(CHUNK);
  for (;;) {
    const read = held.file.readSync(buffer);
    if (read === null || read === 0) return;
    held.offset += read;
    const bytes = new Uint8Array(held.rest.length + read);
    bytes.set(held.rest);
    bytes.set(buffer.subarray(0, read), held.rest.length);
    const end = bytes.lastIndexOf(10) + 1;
    held.rest = bytes.length - end > MAX_LINE_BYTES
      ? new Uint8Array()
      : bytes.slice(end);
    for (const line of decoder.decode(bytes.subarray(0, end)).split("\n")) {
      show(line);
    }
  }
}

/** A rotated file is complete: its last line too. */
function complete(held: Followed, show: (line: string) => void): void {
  readLines(held, show);
  show(decoder.decode(held.rest));
  held.rest = new Uint8Array();
}
