/**
 * Lines about a run's end, for the launcher's log and the journal: the exit
 * line, the `failed` line and its retry; and the line of a health poll that
 * failed on the launcher's side.
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";
import type { LogThrottle } from "../common/log_throttle.ts";
import type { LastExit } from "./engine_detail.ts";
import { describeEnd } from "./restart_policy.ts";

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
  return card.failedRetry ?? failedRetryMs / 1000;
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
