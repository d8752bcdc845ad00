/**
 * What the launcher keeps about each engine run as it begins and ends: the
 * watchdog told its process group, its record in `data/` while it runs, and
 * how it ended (`last_exit`).
 *
 * @module
 */
import type { ServerProcess } from "../engines/server_process.ts";
import type { LastExit } from "./engine_detail.ts";
import type { RunRecorder } from "./records.ts";
import type { EndReason, RunEnd } from "./restart_policy.ts";
import type { RunWatcher } from "./watchdog.ts";

/** How a run ended, in the three forms the supervisor needs. */
export interface RunEnding {
  /** For the restart policy. */
  readonly end: RunEnd;
  /** For `GET /models?detail=1`. */
  readonly lastExit: LastExit;
  /** For log lines: `after 12.3 s`. */
  readonly ran: string;
}

/**
 * One model's runs, as the watchdog and the records see them.
 *
 * @example
 * ```ts ignore
 * const book = new RunBook("qwen3-8b", records);
 * book.began(run, watchdog);
 * const { end, lastExit } = book.ended(run, await run.ended, "exit");
 * ```
 */
export class RunBook {
  readonly #name: string;
  readonly #records: RunRecorder | undefined;
  #watchdog: RunWatcher | undefined;

  /**
   * @param name The model's catalogue name.
   * @param records Where runs are recorded while they run.
   * @param watchdog The launcher's watchdog, if known yet.
   */
  constructor(name: string, records?: RunRecorder, watchdog?: RunWatcher) {
    this.#name = name;
    this.#records = records;
    this.#watchdog = watchdog;
  }

  /** The watchdog told every later run's process group. */
  set watchdog(watchdog: RunWatcher | undefined) {
    this.#watchdog = watchdog ?? this.#watchdog;
  }

  /** A run spawned: the watchdog learns its group, `data/` records it. */
  began(run: ServerProcess): void {
    const pid = run.pid!;
    this.#watchdog?.add(pid);
    this.#records?.write({
      model: this.#name,
      pid,
      command: run.commandLine,
      host: run.host,
      port: run.port,
    });
  }

  /**
   * A run ended: forgotten by the watchdog and the records.
   *
   * @param run The run.
   * @param status Its exit status.
   * @param reason Why the launcher ended it itself, or `"exit"`.
   * @returns How it ended.
   */
  ended(
    run: ServerProcess,
    status: Deno.CommandStatus,
    reason: EndReason,
  ): RunEnding {
    const endedAt = Date.now();
    this.#watchdog?.remove(run.pid!);
    this.#records?.remove(this.#name);
    const end: RunEnd = {
      code: status.signal ? null : status.code,
      signal: status.signal ?? null,
      reason,
    };
    const ranMs = endedAt - (run.startedAt ?? endedAt);
    return {
      end,
      lastExit: {
        code: end.code,
        signal: end.signal,
        at: new Date(endedAt).toISOString(),
        ran_seconds: Math.round(ranMs / 100) / 10,
        reason,
      },
      ran: `after ${(ranMs / 1000).toFixed(1)} s`,
    };
  }
}
