/**
 * How one engine run ended, for `last_exit`, the exit line and the journal:
 * pure, from the run's exit status and its output's cause line; and the line
 * of a health poll that failed on the launcher's side.
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";
import type { LogThrottle } from "../common/log_throttle.ts";
import type { ExitCause } from "../engines/kinds/engine_kind.ts";
import type { ServerProcess } from "../engines/server_process.ts";
import type { LastExit } from "./engine_detail.ts";
import { describeEnd, type EndReason } from "./restart_policy.ts";

/** `run`'s end: the engine's own line decides the cause, else how it ended. */
export function runEnd(
  run: ServerProcess,
  status: Deno.CommandStatus,
  reason: EndReason,
  endedAt: number = Date.now(),
): LastExit {
  const ranMs = endedAt - (run.startedAt ?? endedAt);
  const line = run.watch.cause;
  const cause: ExitCause = line?.cause ?? (status.signal ? "signal" : "exit");
  return {
    code: status.signal ? null : status.code,
    signal: status.signal ?? null,
    at: new Date(endedAt).toISOString(),
    ran_seconds: Math.round(ranMs / 100) / 10,
    reason,
    cause,
    message: line?.message ?? null,
  };
}

/** `exit: code 1 after 0.3 s (bad-arguments: …)`: a cause the code or signal does not already say, with its line. */
export function exitLine(end: LastExit): string {
  const said = end.message ? ` (${end.cause}: ${end.message})` : "";
  return `exit: ${describeEnd(end)} after ${
    end.ran_seconds.toFixed(1)
  } s${said}`;
}

/** Why an engine is `failed`, and when it is tried again (`retry` seconds; 0: never). */
export function failedLine(exit: string, end: LastExit, retry: number): string {
  return `${exit}; not restarted: ${end.cause} twice in a row (fix the card or its files, then reload)${
    retry > 0 ? `; tried again in ${retry} s` : ""
  }`;
}

/** Seconds before a `failed` engine is tried again: its card's `failed_retry`, else `--failed-retry`; 0: never. */
export function retrySeconds(card: ModelCard, failedRetryMs = 0): number {
  return card.failed_retry ?? failedRetryMs / 1000;
}

/** A health poll that failed on the launcher's side: one line per 10 s, then a count; no verdict. */
export function localFailure(
  throttle: LogThrottle,
  name: string,
  local: string,
): undefined {
  // The key doubles as the summary's subject.
  throttle.hit(
    `health polls of engine ${name} that failed on the launcher's side`,
    () =>
      `health poll of engine ${name} failed on the launcher's side, not counted against the engine: ${local}`,
  );
}
