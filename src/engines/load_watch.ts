/**
 * One run's load phase and exit cause, read from its output by its kind's
 * rules (`EngineKind.output`) and from the bytes a download has written.
 * Lines are cut at a bound while they arrive: a binary, huge or endless line
 * is never held whole.
 *
 * @module
 */
import { printable } from "../common/printable.ts";
import type { ExitCause, LoadPhase, OutputRules } from "./kinds/engine_kind.ts";

/** How far a phase has come: weight shards read, or bytes downloaded. */
export interface LoadProgress {
  /** Shards read, or bytes downloaded, so far. */
  readonly done: number;
  /** How many in all, or null when not known (a download's size). */
  readonly total: number | null;
  /** What is counted. */
  readonly unit: "bytes" | "shards";
}

/** The engine line that decided a run's exit cause. */
export interface CauseLine {
  /** The cause the line names. */
  readonly cause: Exclude<ExitCause, "signal" | "exit">;
  /** The line cleaned (`printable`), trimmed, at most 200 characters around the matched words. */
  readonly message: string;
}

const MAX_LINE = 1024;
const MAX_MESSAGE = 200;
/** Output bytes a second read for the rules; beyond, skipped until the next second. */
const READ_PER_SECOND = 256 * 1024;

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

  /** A watch by a kind's rules; none: nothing is ever read. */
  constructor(rules: OutputRules | undefined) {
    this.#rules = rules;
  }

  /** The current phase, or null when not known. */
  get phase(): LoadPhase | null {
    return this.#phase;
  }

  /** When the phase began (`Date.now()` time). */
  get phaseSince(): number | undefined {
    return this.#phaseSince;
  }

  /** How far the phase has come, or null. */
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
    /** Inside a line whose start was skipped: it is dropped whole. */
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
      let start = 0;
      let lf = chunk.indexOf(10);
      let cr = chunk.indexOf(13);
      while (start <= chunk.length) {
        if (lf !== -1 && lf < start) lf = chunk.indexOf(10, start);
        if (cr !== -1 && cr < start) cr = chunk.indexOf(13, start);
        const stop = lf === -1 ? cr : cr === -1 ? lf : Math.min(lf, cr);
        const end = stop === -1 ? chunk.length : stop;
        const room = MAX_LINE - line.length;
        if (room > 0 && end > start) {
          line += decoder.decode(
            chunk.subarray(start, Math.min(end, start + room)),
          );
        }
        if (stop === -1) return;
        if (!broken) this.line(line);
        broken = false;
        line = "";
        start = stop + 1;
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
      for (const rule of rules.causes) {
        const m = rule.match.exec(text);
        if (m) {
          this.#cause = { cause: rule.cause, message: around(text, m) };
          break;
        }
      }
    }
    for (const rule of rules.phases) {
      const m = rule.match.exec(text);
      if (!m) continue;
      const progress: LoadProgress | null = m[2] === undefined
        ? null
        : { done: Number(m[1]), total: Number(m[2]), unit: "shards" };
      this.#enter(rule.phase, progress);
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
  return head +
    text.slice(
      start + head.length,
      start + MAX_MESSAGE - tail.length,
    ) + tail;
}
