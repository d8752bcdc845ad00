// One JSON line per engine state change and launcher event, written in the
// background (supervision never waits for it) and rotated. A path that is not a
// regular file (a FIFO would block the first write for good) turns it off.
import { log } from "../common/log.ts";
import { late } from "../common/sleep.ts";
import { EngineLog, type EngineLogOptions } from "../engines/log_sink.ts";
import type { EngineView } from "./engine_detail.ts";

export interface JournalEvent {
  readonly at: string;
  /** null for the launcher. */
  readonly model: string | null;
  /** `state` for an engine's state change; `started`, `reload`, `stopping` for the launcher's. */
  readonly event: string;
  readonly from: string | null;
  readonly to: string | null;
  /** In a word or two (an exit cause, `gpu-memory-free`, `refused`). */
  readonly reason: string | null;
  readonly detail: string | null;
  readonly drain?: {
    readonly seconds: number;
    readonly finished: number;
    readonly cut: number;
    /** Cut too, having come during the drain (known only by request id). */
    readonly arrived?: number;
  };
  /** On `start` (a first 200): the time to ready and, after an unplanned exit, the recovery. */
  readonly start?: EngineView["last_start"];
  readonly recovery?: EngineView["last_recovery"];
}

export function journalPath(directory: string): string {
  return `${directory}/logs/events.jsonl`;
}

export class Journal implements AsyncDisposable {
  readonly #file: EngineLog | undefined;
  #warned = false;

  constructor(path: string, options: EngineLogOptions = {}) {
    const kind = notRegular(path);
    if (kind) {
      log.warn(
        `Cannot use the journal ${path}: it is ${kind} (expected a regular file, or none yet): the journal is off`,
      );
      return;
    }
    this.#file = new EngineLog(path, {
      ...options,
      onWriteError: (error) => {
        if (this.#warned) return;
        this.#warned = true;
        const why = (error as Error).message;
        log.warn(
          `Cannot write the journal ${path}: ${why} (events are dropped until it can be written)`,
        );
      },
    });
  }

  state(
    at: string,
    model: string,
    from: string,
    to: string,
    reason?: string,
    detail?: string,
  ): void {
    const why = { reason: reason ?? null, detail: detail ?? null };
    this.record({ at, model, event: "state", from, to, ...why });
  }

  /** `at` now, missing fields null; never waits. */
  record(
    event: Partial<JournalEvent> & Pick<JournalEvent, "model" | "event">,
  ): void {
    const line: JournalEvent = {
      at: event.at ?? new Date().toISOString(),
      model: event.model,
      event: event.event,
      from: event.from ?? null,
      to: event.to ?? null,
      reason: event.reason ?? null,
      detail: event.detail ?? null,
      ...event.drain ? { drain: event.drain } : {},
      ...event.start ? { start: event.start } : {},
      ...event.recovery ? { recovery: event.recovery } : {},
    };
    this.#file?.line(JSON.stringify(line));
  }

  // Bounded: a hung disk never holds a stop.
  flush(): Promise<void> {
    return this.#bounded(this.#file?.flush());
  }

  close(): Promise<void> {
    return this.#bounded(this.#file?.close());
  }

  async #bounded(work: Promise<void> | undefined): Promise<void> {
    if (!work || !await late(work, CLOSE_MS)) return;
    const [s, path] = [CLOSE_MS / 1000, this.#file!.path];
    log.warn(
      `The journal ${path} was not written within ${s} s (a disk that hangs?): its last events may be lost`,
    );
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

const CLOSE_MS = 2_000;

function notRegular(path: string): string | undefined {
  let info: Deno.FileInfo;
  try {
    info = Deno.statSync(path);
  } catch {
    return undefined; // none yet: the first write creates it
  }
  if (info.isFile) return undefined;
  if (info.isDirectory) return "a directory";
  if (info.isFifo) return "a FIFO";
  if (info.isCharDevice) return "a character device";
  return "not a regular file";
}
