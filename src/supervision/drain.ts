// The drain before a planned stop: it ends once the requests in flight at its
// start have finished, or at the deadline; SIGTERM comes after. With the
// engine's own view of each request (llama-server's `/slots`) those are known
// by id, so what arrives meanwhile does not hold it (SIGTERM cuts those:
// llama-server cannot refuse new work and serve the rest); without one it
// waits for the running and waiting gauges to read 0, which steady traffic may
// never give. Where SIGTERM itself drains (the kind's `termDrain`: vLLM with
// `--shutdown-timeout`) it is sent at once and the drain ends at the exit.
import { type Clock, REAL_CLOCK, shownAt, sleep } from "../common/sleep.ts";
import type { EnginePlan } from "../engines/engine_plan.ts";
import {
  engineOrigin,
  readEngineRequests,
  readEngineTraffic,
} from "../engines/metrics_read.ts";
import type { TrafficReading } from "../engines/traffic.ts";
import type { EngineDetail } from "./engine_detail.ts";
import type { JournalEvent } from "./journal.ts";
import type { EngineState } from "./engine_state.ts";

/** The states a stop drains from: each has served (the state lags a round: a request may have just woken a sleeping engine). */
export const DRAINS_FROM: readonly EngineState[] = [
  "ready",
  "sleeping",
  "waking",
  "unhealthy",
];

const READ_EVERY_MS = 500;
const READ_TIMEOUT_MS = 2_000;

export type DrainEvent =
  /** null: unreadable; `processing`: the ids the engine's own view gives, when it was read. */
  | {
    kind: "drain-read";
    reading: TrafficReading | null;
    processing?: readonly number[] | null;
  }
  /** `skipped`: a second signal cut the drain short. */
  | { kind: "drain-over"; why: "deadline" | "skipped" | "exited" };

/** `unread`: not even a first reading came; `cut`: still in flight, SIGTERM cuts them. The journal's fields. */
interface DrainEnd {
  readonly reason: "drained" | "deadline" | "skipped" | "unread";
  readonly detail: string;
  readonly drain: NonNullable<JournalEvent["drain"]>;
}

/** What a stop now would drain a ready engine of this plan at most: 0 without a traffic reading. */
export function plannedDrainMs(plan: EnginePlan): number {
  return plan.traffic ? plan.drainMs : 0;
}

function inFlight(r: TrafficReading): number {
  return r.running + r.waiting;
}

type Read<T> = (timeoutMs: number) => Promise<T | null>;

// Those processing at the start, and the next `waiting` to start: llama-server
// takes deferred tasks first in, first out, numbered as they arrive.
interface Held {
  readonly ids: Set<number>;
  readonly seen: Set<number>;
  readonly waiting: number;
  readonly began: number;
  taken: number;
  /** Of those, still processing or queued at the last read. */
  left: number;
  /** The last read inferred starts it never saw: the next one confirms. */
  unsure: boolean;
}

/** What of `held` is still processing or queued; the lowest new ids are taken as the queued ones' starts. */
function heldLeft(
  held: Held,
  processing: readonly number[],
  reading: TrafficReading,
): number {
  const fresh = processing.filter((id) => !held.seen.has(id));
  for (const id of fresh.sort((a, b) => a - b)) {
    held.seen.add(id);
    if (held.taken < held.waiting) {
      held.ids.add(id);
      held.taken++;
    }
  }
  const busy = processing.filter((id) => held.ids.has(id)).length;
  // Unseen starts are still queued, up to the gauge; the rest began and ended between reads.
  const unseen = held.waiting - held.taken;
  held.left = busy + Math.min(unseen, reading.waiting);
  // One taken from the queue but not yet on a slot is in neither: an inferred end waits one more read.
  held.unsure = held.left === 0 && unseen > 0 && !held.unsure;
  return held.left;
}

export class Drain {
  readonly since: number;
  readonly deadline: number;
  #last: TrafficReading | null = null;
  #finished = 0;
  #held: Held | undefined;
  #note = "";
  /** SIGTERM was sent at its start: the engine's exit ends it. */
  #termed = false;
  #stop = new AbortController();
  readonly #over = Promise.withResolvers<void>();
  readonly over: Promise<void> = this.#over.promise;

  /** Undefined when the engine gets none (`say` tells why where it is not the operator's choice); `plan`: the running run's (its key). */
  static begin(
    state: EngineState,
    plan: EnginePlan,
    emit: (event: DrainEvent) => void,
    say: (line: string) => void,
    term: () => void,
    clock: Clock = REAL_CLOCK,
  ): Drain | undefined {
    if (state === "starting") say("not drained: still starting");
    if (!DRAINS_FROM.includes(state)) return undefined;
    const { drainMs: ms, traffic: rule } = plan;
    if (ms > 0 && !rule) {
      say(
        "not drained: no traffic reading (an engine: command card without metrics:)",
      );
    }
    if (ms <= 0 || !rule) return undefined;
    const { apiKey } = plan;
    const origin = engineOrigin(plan.host, plan.port);
    const traffic = (t: number) => readEngineTraffic(origin, rule, apiKey, t);
    const view = rule.requests;
    const requests = view &&
      ((t: number) => readEngineRequests(origin, view, apiKey, t));
    const drain = new Drain(ms, traffic, emit, requests, clock);
    drain.#termed = plan.termDrains;
    if (drain.#termed) term();
    return drain;
  }

  constructor(
    ms: number,
    read: Read<TrafficReading>,
    emit: (event: DrainEvent) => void,
    requests?: Read<number[]>,
    readonly clock: Clock = REAL_CLOCK,
  ) {
    this.since = clock.now();
    this.deadline = this.since + ms;
    void this.#loop(read, emit, requests);
  }

  view(): NonNullable<EngineDetail["drain"]> {
    return {
      since: shownAt(this.clock, this.since),
      deadline: shownAt(this.clock, this.deadline),
      running: this.#last?.running ?? null,
      waiting: this.#last?.waiting ?? null,
    };
  }

  step(event: DrainEvent): DrainEnd | undefined {
    if (event.kind === "drain-over") {
      if (event.why !== "exited") return this.#end(event.why);
      if (!this.#termed) return undefined; // a crash: no drain to tell
      // It refused arrivals: what was in flight at the last read it finished.
      if (this.#last) this.#finished += inFlight(this.#last);
      if (this.#last) this.#last = { ...this.#last, running: 0, waiting: 0 };
      return this.#end("drained");
    }
    const { reading, processing } = event;
    // A later failed read (an engine busy past 2 s) waits on: the deadline bounds it.
    if (reading === null) {
      return this.#last === null ? this.#end("unread") : undefined;
    }
    if (this.#last === null && processing) {
      const ids = new Set(processing);
      this.#held = {
        ids,
        seen: new Set(ids),
        waiting: reading.waiting,
        began: ids.size + reading.waiting,
        taken: 0,
        left: ids.size + reading.waiting,
        unsure: false,
      };
    } else if (this.#last === null && processing === null) {
      this.#note = " (its own view of requests could not be read)";
    } else if (this.#last && !this.#held) {
      // A lower bound: what arrived and left between two reads is not seen.
      this.#finished += Math.max(0, inFlight(this.#last) - inFlight(reading));
    }
    this.#last = reading;
    const held = this.#held;
    if (inFlight(reading) === 0) {
      if (held) held.left = 0;
      return this.#end("drained");
    }
    if (!held || !processing) return undefined;
    const left = heldLeft(held, processing, reading);
    return left === 0 && !held.unsure ? this.#end("drained") : undefined;
  }

  /** Ends the reads (the engine left `draining` some other way). */
  close(): void {
    this.#stop.abort();
    this.#over.resolve();
  }

  #end(reason: DrainEnd["reason"]): DrainEnd {
    this.close();
    const seconds = Math.round((this.clock.now() - this.since) / 100) / 10;
    const held = this.#held;
    const now = this.#last ? inFlight(this.#last) : 0;
    // By id: of those in flight at the start; arrivals are what else is in flight.
    const cut = held ? held.left : now; // 0 when drained
    const n = held ? held.began - cut : this.#finished;
    const arrived = held ? Math.max(0, now - cut) : 0;
    const came = arrived > 0 ? ` (${arrived} that came during it cut)` : "";
    const s = n === 1 ? "" : "s";
    const tally = `${n} request${s} finished, ${cut} cut${came}${this.#note}`;
    const detail = reason === "unread"
      ? "not drained: its metrics could not be read"
      : reason === "drained"
      ? `drained in ${seconds} s: ${tally}`
      : reason === "deadline"
      ? `drain deadline passed after ${seconds} s: ${tally}`
      : `drain cut short by a second signal after ${seconds} s: ${tally}`;
    return {
      reason,
      detail,
      drain: { seconds, finished: n, cut, ...held ? { arrived } : {} },
    };
  }

  async #loop(
    read: Read<TrafficReading>,
    emit: (event: DrainEvent) => void,
    requests: Read<number[]> | undefined,
  ): Promise<void> {
    const signal = this.#stop.signal;
    const budget = () =>
      Math.max(1, Math.min(READ_TIMEOUT_MS, this.deadline - this.clock.now()));
    while (!signal.aborted) {
      if (this.deadline <= this.clock.now()) {
        return emit({ kind: "drain-over", why: "deadline" });
      }
      const reading = await read(budget());
      if (signal.aborted) return;
      if (reading === null && this.clock.now() >= this.deadline) continue;
      // Only with something in flight: llama-server's `/slots` wakes it from sleep.
      const ask = requests && reading && inFlight(reading) > 0 &&
        (this.#last === null || this.#held);
      const view = ask ? { processing: await requests(budget()) } : {};
      if (signal.aborted) return;
      emit({ kind: "drain-read", reading, ...view });
      const wait = Math.min(READ_EVERY_MS, this.deadline - this.clock.now());
      await sleep(Math.max(wait, 0), signal, this.clock);
    }
  }
}
