import { printable } from "../common/printable.ts";
import { sleep } from "../common/sleep.ts";

export interface EventsOptions {
  directory?: string | undefined;
  /** This model's events and the launcher's own. */
  model?: string | undefined;
  /** Epoch milliseconds. */
  since?: number | undefined;
  json?: boolean;
  follow?: boolean;
  signal?: AbortSignal | undefined;
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

/** 1 without a journal. */
export async function showEvents(options: EventsOptions): Promise<number> {
  const directory = options.directory ?? Deno.env.get("MY_LOCAL");
  if (!directory) {
    console.error(
      "Cannot read the journal: no directory (pass --directory or set MY_LOCAL)",
    );
    return 1;
  }
  const path = `${directory}/logs/events.jsonl`;
  const { model, since, print = console.log } = options;
  const show = (line: string) => {
    const e = parsed(line);
    if (e === undefined) return;
    if (model !== undefined && e?.model !== null && e?.model !== model) return;
    if (since !== undefined && Date.parse(e?.at) < since) return;
    const out = options.json ? escapedJson(line) : eventText(line);
    if (out !== undefined) print(out);
  };
  let held: Followed | undefined;
  try {
    for (;;) {
      if (held === undefined || rotatedAway(path, held)) {
        // The newest is held next (a rotated one while the journal is not yet
        // written again); those before it, the one held first, are finished.
        const files = newerFiles(path, held);
        held = files.pop();
        for (const file of files) finish(file, show);
      }
      if (held === undefined) {
        console.error(`no journal at ${path} (has a launcher run there?)`);
        return 1;
      }
      readLines(held, show);
      if (!options.follow || options.signal?.aborted) break;
      await sleep(FOLLOW_POLL_MS, options.signal);
    }
  } catch (error) {
    held?.file.close();
    throw error;
  }
  finish(held, show);
  return 0;
}

/** An open journal file, read up to `offset`; `rest` is a line still being written. */
interface Followed {
  file: Deno.FsFile;
  info: Deno.FileInfo;
  offset: number;
  decoder: TextDecoder;
  rest: string;
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
  const info = file.statSync();
  return { file, info, offset: 0, decoder: new TextDecoder(), rest: "" };
}

function sameFile(a: Deno.FileInfo, b: Deno.FileInfo): boolean {
  return a.ino === b.ino && a.dev === b.dev;
}

function rotatedAway(path: string, held: Followed): boolean {
  try {
    return !sameFile(Deno.statSync(path), held.info);
  } catch {
    return true;
  }
}

/** `held` and the files written after it, oldest first (`path.N` … `path.1`, `path`); all of them without `held`. */
function newerFiles(path: string, held?: Followed): Followed[] {
  const files: Followed[] = [];
  for (let n = 1, file; (file = openJournal(`${path}.${n}`)); n++) {
    if (held && sameFile(file.info, held.info)) {
      file.file.close();
      break;
    }
    files.unshift(file);
  }
  const all = [held, ...files, openJournal(path)];
  return all.filter((file) => file !== undefined);
}

const CHUNK = 64 * 1024;
// A journal from elsewhere may hold no line break at all: no unbounded line.
const MAX_LINE = 1024 * 1024;

/** Whole lines only; a line still being written waits for the next look. */
function readLines(held: Followed, show: (line: string) => void): void {
  const buffer = new Uint8Array(CHUNK);
  for (let read; (read = held.file.readSync(buffer));) {
    held.offset += read;
    const text = held.decoder.decode(buffer.subarray(0, read), {
      stream: true,
    });
    const lines = (held.rest + text).split("\n");
    held.rest = lines.pop()!;
    if (held.rest.length > MAX_LINE) held.rest = "";
    lines.forEach(show);
  }
}

/** A rotated file is complete: its last line too. */
function finish(held: Followed, show: (line: string) => void): void {
  try {
    readLines(held, show);
    show(held.rest + held.decoder.decode());
  } finally {
    held.file.close();
  }
}
