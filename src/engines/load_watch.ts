// One run's load phase and exit cause, read from its output by its kind's
// rules and from the bytes a hub download has written. Lines are cut at a
// bound while they arrive: a binary, huge or endless line is never held whole.
import { printable } from "../common/printable.ts";
import type {
  ExitCause,
  LoadPhase,
  OutputRules,
  SleepLine,
} from "./kinds/engine_kind.ts";
import { FootprintLines } from "./footprint_lines.ts";

/** `total` null when not known (a download's size). */
export interface LoadProgress {
  readonly done: number;
  readonly total: number | null;
  readonly unit: "bytes" | "shards";
}

export interface CauseLine {
  readonly cause: Exclude<ExitCause, "signal" | "exit">;
  /** Cleaned (`printable`), at most 200 characters around the match. */
  readonly message: string;
}

const MAX_LINE = 1024;
const MAX_MESSAGE = 200;
// Past it, the rest of the second is skipped: engines print their phases far
// slower, and a flood must not cost the pipe its speed.
const READ_PER_SECOND = 256 * 1024;
// A cache left with thousands of `.incomplete` blobs is never stat'ed whole.
const MAX_STATS = 256;

export class LoadWatch {
  phase: LoadPhase | null = null;
  phaseSince: number | undefined;
  progress: LoadProgress | null = null;
  /** When a phase line last printed or the download last grew. */
  progressAt: number | undefined;
  /** When each phase began first (its `now`: an engine run's clock). */
  readonly began: Partial<Record<LoadPhase, number>> = {};
  now: () => number = () => performance.now();
  /** The first line that named a cause since the first 200 (before it, while loading). */
  cause: CauseLine | undefined;
  /** What its lines say the load took; `onMemory` hears each line that adds to it. */
  readonly memory: FootprintLines;
  onMemory: (() => void) | undefined;
  /** Hears each of its kind's sleep lines (`OutputRules.sleep`): a llama.cpp wake is a load window of its own. */
  onSleep:
    | ((line: SleepLine, text: string, said: readonly string[]) => void)
    | undefined;
  readonly #rules: OutputRules | undefined;
  // Load lines count from the spawn to the first 200 (or the kind's end of a
  // load), and again at a wake: after it, a line may be a request's body.
  #loading = true;
  #served = false;
  #windowAt = 0;
  #windowBytes = 0;
  #bytes: number | null | undefined;

  /** `name`: the engine's, for its warnings. */
  constructor(rules: OutputRules | undefined, name?: string) {
    this.#rules = rules;
    this.memory = new FootprintLines(rules?.memory, name);
  }

  /** Served a first 200, and not loading again (a wake): what its lines measured is a whole load. */
  get loaded(): boolean {
    return this.#served && !this.#loading;
  }

  // What it printed while loading (a missing optional file's 404) says nothing of how it will end.
  served(): void {
    this.cause = undefined;
    this.#loading = false;
    this.#served = true;
  }

  /** One per stream: splits at `\n` and `\r` (progress bars redraw with `\r`). */
  feeder(): (chunk: Uint8Array) => void {
    if (!this.#rules) return () => {};
    const decoder = new TextDecoder();
    let line = "";
    // Inside a line whose start was skipped: it is dropped whole.
    let broken = false;
    return (chunk) => {
      const now = this.now();
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

  line(raw: string): void {
    const rules = this.#rules;
    if (!rules || raw.length === 0) return;
    // Cleaned at capture: whatever the launcher shows of it is harmless.
    const text = printable(raw).trim();
    if (rules.load?.opens.test(text)) {
      this.#loading = true;
      this.memory.parts = {};
      this.memory.devices = [];
    }
    if (this.#loading && this.memory.line(text)) this.onMemory?.();
    if (this.#loading && rules.load?.closes.test(text)) {
      this.#loading = false;
      this.onMemory?.();
    }
    for (const [line, match] of Object.entries(rules.sleep ?? {})) {
      const found = match.exec(text);
      if (found) this.onSleep?.(line as SleepLine, text, found.slice(1));
    }
    if (!this.cause) {
      for (const { match, cause } of rules.causes) {
        const m = match.exec(text);
        if (m) {
          this.cause = { cause, message: around(text, m) };
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

  /** Only growth counts: a blob a killed run left behind is no download. */
  downloaded(bytes: number | null): void {
    const before = this.#bytes;
    this.#bytes = bytes;
    if (bytes !== null && before !== undefined && bytes > (before ?? 0)) {
      this.#enter("downloading", { done: bytes, total: null, unit: "bytes" });
    }
  }

  #enter(phase: LoadPhase, progress: LoadProgress | null): void {
    const now = this.now();
    if (phase !== this.phase) {
      this.phase = phase;
      this.phaseSince = now;
      this.began[phase] ??= now;
    }
    this.progress = progress;
    this.progressAt = now;
  }
}

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
 * Bytes in a repository's `*.incomplete` blobs, null when none: huggingface_hub
 * writes `models--ORG--NAME/blobs/<hash>.incomplete` and renames it when done
 * (file_download.py, `_download_to_tmp_and_move`). Asynchronous: 50,000 blobs
 * read synchronously cost `/health` 263 ms.
 */
export async function incompleteBytes(
  cache: string,
  hubId: string,
): Promise<number | null> {
  const blobs = `${cache}/models--${hubId.replaceAll("/", "--")}/blobs`;
  const sizes: number[] = [];
  try {
    for await (const entry of Deno.readDir(blobs)) {
      if (!entry.name.endsWith(".incomplete")) continue;
      // Renamed between the listing and the stat: finished.
      const info = await Deno.stat(`${blobs}/${entry.name}`).catch(() => null);
      sizes.push(info?.size ?? 0);
      if (sizes.length >= MAX_STATS) break;
    }
  } catch {
    return null;
  }
  return sizes.length === 0 ? null : sizes.reduce((sum, size) => sum + size);
}
