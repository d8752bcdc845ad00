/**
 * The journal: every engine state change and every launcher event, one JSON
 * object per line in `<directory>/logs/events.jsonl`, for what happened while
 * nobody watched. It is an {@linkcode EngineLog} underneath: queued, written
 * in the background, rotated like an engine log; supervision never waits
 * for it, and a journal that cannot be written costs one warning.
 *
 * @module
 */
import { log } from "../common/log.ts";
import { EngineLog, type EngineLogOptions } from "../engines/log_sink.ts";

/** One line of the journal. */
export interface JournalEvent {
  readonly at: string;
  /** The engine's catalogue name; null for the launcher. */
  readonly model: string | null;
  /** `state` for an engine's state change; `started`, `reload`, `stopping` for the launcher's. */
  readonly event: string;
  readonly from: string | null;
  readonly to: string | null;
  /** Why, in a word or two (an exit cause, `gpu-memory-free`, `refused`), or null. */
  readonly reason: string | null;
  /** One line for people, or null. */
  readonly detail: string | null;
  /** A `drain` event's tally (`supervision/drain.ts`): seconds, requests finished and cut. */
  readonly drain?: {
    readonly seconds: number;
    readonly finished: number;
    readonly cut: number;
  };
}

export function journalPath(directory: string): string {
  return `${directory}/logs/events.jsonl`;
}

export class Journal implements AsyncDisposable {
  readonly #file: EngineLog;
  #warned = false;

  constructor(path: string, options: EngineLogOptions = {}) {
    this.#file = new EngineLog(path, {
      ...options,
      onWriteError: (error) => {
        if (this.#warned) return;
        this.#warned = true;
        log.warn(
          `Cannot write the journal ${path}: ${
            (error as Error).message
          } (events are dropped until it can be written)`,
        );
      },
    });
  }

  get path(): string {
    return this.#file.path;
  }

  /** Appends one event (`at` now, missing fields null); never waits. */
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
    };
    this.#file.line(JSON.stringify(line));
  }

  flush(): Promise<void> {
    return this.#file.flush();
  }

  close(): Promise<void> {
    return this.#file.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}
