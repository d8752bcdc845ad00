/**
 * One run's load phase and exit cause, read from its output by its kind's
 * rules (`EngineKind.output`) and from the bytes a hub download has written.
 * Lines are cut at a bound while they arrive: a binary, huge or endless line
 * is never held whole.
 *
 * @module
 */
import { printable } from "../common/printable.ts";
import type { ExitCause, LoadPhase, OutputRules } from "./kinds/engine_kind.ts";

/** Weight shards read, or bytes downloaded; `total` null when not known (a download's size). */
export interface LoadProgress {
  readonly done: number;
  readonly total: number | null;
  readonly unit: "bytes" | "shards";
}

/** The engine line that decided a run's exit cause. */
export interface CauseLine {
  readonly cause: Exclude<ExitCause, "signal" | "exit">;
  /** The line cleaned (`printable`), trimmed, at most 200 characters around the matched words. */
  readonly message: string;
}

const MAX_LINE = 1024;
const MAX_MESSAGE = 200;
/** Output bytes a second read for the rules; beyond, skipped until the next second. */
const READ_PER_SECOND = 256 * 1024;
/** Blobs sized per look: a cache left with thousands of `.incomplete` blobs is never stat'ed whole at once. */
const MAX_STATS = 256;

/**
 * Watches one run: fed output chunks (one feeder per stream) and the bytes a
 * download has on disk, it says the phase, its progress and the exit cause.
 */
export class LoadWatch {
  readonly #rules: OutputRules | undefined;
  #phase: LoadPhase | null = null;
  #phaseSince: number | undefined;
  #progress: LoadProgress | null = null;
  #progressAt: number | undefined;
  #cause: CauseLine | undefined;
  #windowAt = 0;
  #windowBytes = 0;
  #bytes: number | null | undefined;

  /** No rules: nothing is ever read. */
  constructor(rules: OutputRules | undefined) {
    this.#rules = rules;
  }

  get phase(): LoadPhase | null {
    return this.#phase;
  }

  /** When the phase began (`Date.now()` time). */
  get phaseSince(): number | undefined {
    return this.#phaseSince;
  }

  get progress(): LoadProgress | null {
    return this.#progress;
  }

  /** When a phase line last printed or the download last grew (`Date.now()` time). */
  get progressAt(): number | undefined {
    return this.#progressAt;
  }

  /** The first line that named a cause since the run answered 200 (before it, while it loaded), if any did. */
  get cause(): CauseLine | undefined {
    return this.#cause;
  }

  /**
   * The run answered its first 200: what it printed while loading (a missing
   * optional file's 404, say) says nothing of how it will end.
   */
  served(): void {
    this.#cause = undefined;
  }

  /**
   * A line splitter for one stream: splits at `\n` and `\r` (progress bars
   * redraw with `\r`). Past 256 KiB in a second, the rest of that second is
   * skipped: engines print their phases far slower, and a flood must not cost
   * the pipe its speed.
   */
  feeder(): (chunk: Uint8Array) => void {
    if (!this.#rules) return () => {};
    const decoder = new TextDecoder();
    let line = "";
    // Inside a line whose start was skipped: it is dropped whole.
    let broken = false;
    return (chunk) => {
      const now = Date.now();
      if (now - this.#windowAt >= 1_000) {
        this.#windowAt = now;
        this.#windowBytes = 0;
      }
      this.#windowBytes += chunk.length;
      if (this.#windowBytes > READ_PER_SECOND) {
        line = "";
        broken = true;
        return;
      }
      const parts = decoder.decode(chunk, { stream: true }).split(/[\r\n]/);
      parts[0] = line + parts[0];
      line = parts.pop()!.slice(0, MAX_LINE);
      for (const part of parts) {
        if (!broken) this.line(part.slice(0, MAX_LINE));
        broken = false;
      }
    };
  }

  /** Reads one line, already cut to a bound, without its end. */
  line(raw: string): void {
    const rules = this.#rules;
    if (!rules || raw.length === 0) return;
    // Cleaned at capture: whatever the launcher shows of it is harmless.
    const text = printable(raw).trim();
    if (!this.#cause) {
      for (const { match, cause } of rules.causes) {
        const m = match.exec(text);
        if (m) {
          this.#cause = { cause, message: around(text, m) };
          break;
        }
      }
    }
    for (const { match, phase } of rules.phases) {
      const m = match.exec(text);
      if (!m) continue;
      this.#enter(
        phase,
        m[2] === undefined
          ? null
          : { done: Number(m[1]), total: Number(m[2]), unit: "shards" },
      );
      return;
    }
  }

  /** The bytes of a download under way (null: none); growth is the `downloading` phase. */
  downloaded(bytes: number | null): void {
    // Only growth counts: a blob a killed run left behind is no download.
    const before = this.#bytes;
    this.#bytes = bytes;
    if (bytes === null || before === undefined || bytes <= (before ?? 0)) {
      return;
    }
    this.#enter("downloading", { done: bytes, total: null, unit: "bytes" });
  }

  #enter(phase: LoadPhase, progress: LoadProgress | null): void {
    const now = Date.now();
    if (phase !== this.#phase) {
      this.#phase = phase;
      this.#phaseSince = now;
    }
    this.#progress = progress;
    this.#progressAt = now;
  }
}

/** At most 200 characters of `text` around the match, a cut end marked `…`. */
function around(text: string, m: RegExpExecArray): string {
  if (text.length <= MAX_MESSAGE) return text;
  const middle = m.index + Math.floor(m[0].length / 2);
  const start = Math.min(
    Math.max(middle - MAX_MESSAGE / 2, 0),
    text.length - MAX_MESSAGE,
  );
  const head = start > 0 ? "…" : "";
  const tail = start + MAX_MESSAGE < text.length ? "…" : "";
  const end = start + MAX_MESSAGE - tail.length;
  return head + text.slice(start + head.length, end) + tail;
}

/** `HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub` (huggingface_hub/constants.py). */
export function hubCache(env: Readonly<Record<string, string>>): string {
  if (env.HF_HUB_CACHE) return env.HF_HUB_CACHE;
  if (env.HF_HOME) return `${env.HF_HOME}/hub`;
  const cache = env.XDG_CACHE_HOME || `${env.HOME ?? ""}/.cache`;
  return `${cache}/huggingface/hub`;
}

/**
 * Bytes in one repository's `*.incomplete` blobs (the first 256 listed), or
 * null when there are none: `huggingface_hub` writes each file to
 * `models--ORG--NAME/blobs/<hash>.incomplete` and renames it when done
 * (src/huggingface_hub/file_download.py, `_download_to_tmp_and_move`).
 * Asynchronous: 50,000 blobs cost the event loop no stall (they cost
 * `/health` 263 ms when read synchronously).
 */
export async function incompleteBytes(
  cache: string,
  hubId: string,
): Promise<number | null> {
  const blobs = `${cache}/models--${hubId.replaceAll("/", "--")}/blobs`;
  const names: string[] = [];
  try {
    for await (const entry of Deno.readDir(blobs)) {
      if (entry.name.endsWith(".incomplete")) names.push(entry.name);
      if (names.length >= MAX_STATS) break;
    }
  } catch {
    return null;
  }
  if (names.length === 0) return null;
  let total = 0;
  for (const name of names) {
    // Renamed between the listing and the stat: finished.
    total += (await Deno.stat(`${blobs}/${name}`).catch(() => null))?.size ?? 0;
  }
  return total;
}
