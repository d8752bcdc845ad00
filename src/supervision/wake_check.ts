// After each wake the engine proves it serves: its own counters show a
// request's output since the wake, or, with nothing in flight a few seconds
// after it, one canary of one token comes back with one. A reload that left
// nothing behind its 200s (an empty answer, no token) moves no counter and
// runs no request, so neither the stall rule nor the liveness poll sees it:
// here it is a stall. The launcher has no proxy; the engine's metrics and its
// answer to the canary are all it sees. Only right after a wake: the canary
// never wakes a sleeper, and an engine that never slept gets none.
import type { Verb } from "../catalogue.ts";
import { log } from "../common/log.ts";
import { clip } from "../common/one_line.ts";
import { printable } from "../common/printable.ts";
import { type Clock, shownAt } from "../common/sleep.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";
import type { EngineAnswer } from "../engines/metrics_read.ts";
import type { ServerProcess } from "../engines/server_process.ts";
import { sleepSeconds } from "../engines/sleep_after.ts";
import {
  type CanaryRequest,
  cheapRequest,
  type TrafficReading,
} from "../engines/traffic.ts";
import type { EngineView } from "./engine_detail.ts";
import type { Journal } from "./journal.ts";
import type { Watched } from "./sleep_watch.ts";

/** How long after a wake a request has to show its output before the canary goes. */
export const WAKE_PROOF_MS = 3_000;

/** `?detail=1`'s `sleep.last_wake_check`. */
export type WakeCheckView = NonNullable<
  NonNullable<EngineView["sleep"]>["last_wake_check"]
>;

/**
 * When after a wake the canary may go: from {@linkcode WAKE_PROOF_MS} (half
 * the idle time where that is shorter) until three quarters of the idle time
 * since the last request seen, past which the engine may be asleep again and
 * a canary would wake it (llama.cpp counts its idle time from its last task,
 * tools/server/server-queue.cpp `start_loop`).
 *
 * @example `canaryWindow(2)` is `{ fromMs: 1000, untilMs: 1500 }`.
 */
export function canaryWindow(
  sleepAfterSeconds: number,
): { fromMs: number; untilMs: number } {
  const idleMs = sleepAfterSeconds * 1000;
  return {
    fromMs: Math.min(WAKE_PROOF_MS, idleMs / 2),
    untilMs: idleMs * 0.75,
  };
}

/**
 * Whether a 200's body carries what its verb makes: a chat's content (or its
 * reasoning) or completion tokens, a completion's text, an embedding.
 *
 * @example `carriesOutput("chat", '{"choices":[]}')` is false.
 */
export function carriesOutput(verb: Verb, text: string): boolean {
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    return false;
  }
  if (verb === "embed") {
    const vector = body?.data?.[0]?.embedding;
    return (Array.isArray(vector) || typeof vector === "string") &&
      vector.length > 0;
  }
  if (body?.usage?.completion_tokens >= 1) return true;
  const choice = body?.choices?.[0];
  const said = verb === "chat"
    ? [choice?.message?.content, choice?.message?.reasoning_content]
    : [choice?.text];
  return said.some((s) => typeof s === "string" && s.length > 0);
}

/** The counter a request of the verb moves: generated tokens, or an embedding's prompt tokens. */
function countOf(verb: Verb, reading: TrafficReading): number {
  return verb === "embed" ? reading.prompt : reading.generated;
}

interface Pending {
  readonly run: ServerProcess;
  readonly since: number;
  /** The count at the last round that found it asleep; null: the first round after the wake sets it. */
  base: number | null;
  /** The last time a request was seen in flight (or the wake). */
  active: number;
  sent: boolean;
}

/** One engine's check after each wake, fed by the serving watch's rounds; e.g. `check.view()?.ok`. */
export class WakeCheck {
  readonly #engine: Watched;
  readonly #clock: Clock;
  readonly #journal: Journal | undefined;
  readonly #failed: (run: ServerProcess, seen: string) => void;
  #pending: Pending | null = null;
  #view: WakeCheckView | null = null;
  #slept: number | null = null; // the count read asleep since the last wake
  #last: number | null = null; // the last count read
  #wokenAt = -Infinity;

  constructor(
    engine: Watched,
    o: { clock: Clock; journal: Journal | undefined },
    failed: (run: ServerProcess, seen: string) => void,
  ) {
    [this.#engine, this.#clock, this.#journal] = [engine, o.clock, o.journal];
    this.#failed = failed;
  }

  /** Null before a wake; while unproven, `ok` null at the wake's time. */
  view(): WakeCheckView | null {
    const p = this.#pending;
    const at = p && shownAt(this.#clock, p.since);
    return at ? { by: null, ok: null, at } : this.#view;
  }

  /** A wake of run `run` ended now (its engine's line; the launcher's own wake): from here it must prove it. */
  woken(run: ServerProcess): void {
    const { card, traffic } = this.#engine.plan;
    const now = this.#clock.now();
    // Asleep nothing is generated: the last count read before the wake is
    // its count asleep, where no round found it asleep (a short sleep).
    const base = this.#slept ?? this.#last;
    [this.#slept, this.#wokenAt] = [null, now];
    // No counter to read, or no request to send: nothing could prove it.
    if (!traffic || !cheapRequest(card)) return;
    this.#pending = { run, since: now, base, active: now, sent: false };
  }

  /** A new run: a wake of the last one proves nothing now. */
  reset(): void {
    [this.#pending, this.#slept, this.#wokenAt] = [null, null, -Infinity];
    this.#last = null;
  }

  /**
   * A health round begun at `began` read `reading` (null: unreadable), the
   * engine `asleep` or not: the request to send now as the wake's canary.
   */
  round(
    run: ServerProcess,
    began: number,
    reading: TrafficReading | null,
    asleep: boolean,
  ): CanaryRequest | null {
    const { card, canaryMs } = this.#engine.plan;
    const count = reading && countOf(card.verb, reading);
    // A round asked before the wake answered after it: not a count asleep.
    if (asleep && count !== null && began >= this.#wokenAt) {
      this.#slept = count;
    }
    if (count !== null) this.#last = count;
    const p = this.#pending;
    if (!p || p.run !== run || began < p.since || p.sent) return null;
    if (asleep) {
      log.info(
        `engine ${this.#engine.name} (pid ${run.pid}) asleep again before its wake was proven (a canary now would wake it)`,
      );
      return this.#end(null, null);
    }
    if (count === null) return null;
    if (p.base === null) {
      p.base = count;
      return null;
    }
    if (count > p.base) return this.#end("request", true);
    if (reading!.running + reading!.waiting > 0) {
      p.active = reading!.at;
      return null;
    }
    const after = sleepSeconds(card, ENGINE_KINDS[card.engine]) ?? Infinity;
    const { fromMs, untilMs } = canaryWindow(after);
    const now = this.#clock.now();
    if (canaryMs <= 0 || now - p.since < fromMs || now - p.active >= untilMs) {
      return null;
    }
    p.sent = true;
    return cheapRequest(card);
  }

  /** The canary's answer: a 200 carrying output proves the wake; one with none, a 5xx or none at all fails it (a stall). */
  answered(run: ServerProcess, path: string, answer: EngineAnswer): void {
    const p = this.#pending;
    if (!p || p.run !== run) return;
    const verb = this.#engine.plan.card.verb;
    if (answer.ok && carriesOutput(verb, answer.text)) {
      return void this.#end("canary", true);
    }
    const { name } = this.#engine;
    const status = answer.status ?? 500;
    // A refusal (4xx; 501: it does not do this) is the engine's answer: it proves nothing, blames nothing.
    if (!answer.ok && (status < 500 || status === 501)) {
      log.warn(
        `engine ${name} (pid ${run.pid}) its wake is not proven: canary ${path} ${answer.why}`,
      );
      return void this.#end("canary", null);
    }
    const body = answer.ok && clip(printable(answer.text)).trim();
    const what = answer.ok
      ? `answered ${answer.status} with no token: ${body || "an empty body"}`
      : answer.why;
    const detail = `after its wake a canary of one token to ${path} ${what}`;
    this.#end("canary", false);
    log.warn(`engine ${name} (pid ${run.pid}) ${detail}`);
    const at = shownAt(this.#clock, this.#clock.now());
    const reason = "wake-check-failed";
    this.#journal?.record({ at, model: name, event: "sleep", reason, detail });
    this.#failed(run, detail);
  }

  #end(by: WakeCheckView["by"], ok: boolean | null): null {
    const at = shownAt(this.#clock, this.#clock.now());
    [this.#view, this.#pending] = [{ by, ok, at }, null];
    return null;
  }
}
