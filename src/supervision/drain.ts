// The drain before a planned stop: the engine's own running and waiting
// requests, read until both are 0 or the deadline passes; SIGTERM comes after.
// vLLM aborts every request in flight at SIGTERM unless `--shutdown-timeout`
// is set (its default is 0, vLLM PR #36666); llama-server and SGLang cut too.
import type { ModelCard } from "../catalogue.ts";
import { sleep } from "../common/sleep.ts";
import type { EnginePlan } from "../engines/engine_plan.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";
import { engineOrigin, readEngineTraffic } from "../engines/metrics_read.ts";
import { type TrafficReading, trafficRule } from "../engines/traffic.ts";
import type { EngineDetail } from "./engine_detail.ts";
import type { JournalEvent } from "./journal.ts";

const READ_EVERY_MS = 500;
const READ_TIMEOUT_MS = 2_000;

export type DrainEvent =
  /** null: unreadable. */
  | { readonly kind: "drain-read"; readonly reading: TrafficReading | null }
  /** `skipped`: a second signal cut the drain short. */
  | { readonly kind: "drain-over"; readonly why: "deadline" | "skipped" };

/** `unread`: not even a first reading came; `cut`: still in flight, SIGTERM cuts them. The journal's fields. */
interface DrainEnd {
  readonly reason: "drained" | "deadline" | "skipped" | "unread";
  readonly detail: string;
  readonly drain: NonNullable<JournalEvent["drain"]>;
}

/** A card's `drain_timeout`, else the launcher's; 0: none. */
export function drainMs(card: ModelCard, launcherMs: number): number {
  return card.drainTimeout === undefined
    ? launcherMs
    : card.drainTimeout * 1000;
}

/** What a stop now would drain a ready engine of this card at most: 0 without a traffic reading. */
export function plannedDrainMs(card: ModelCard, launcherMs: number): number {
  return trafficRule(card, ENGINE_KINDS[card.engine]!)
    ? drainMs(card, launcherMs)
    : 0;
}

function inFlight(r: TrafficReading): number {
  return r.running + r.waiting;
}

export class Drain {
  readonly since = Date.now();
  readonly deadline: number;
  #last: TrafficReading | null = null;
  #finished = 0;
  #stop = new AbortController();
  readonly #over = Promise.withResolvers<void>();
  readonly over: Promise<void> = this.#over.promise;

  /** Undefined when the engine gets none (`say` tells why where it is not the operator's choice). */
  static begin(
    plan: EnginePlan,
    launcherMs: number,
    emit: (event: DrainEvent) => void,
    say: (line: string) => void,
  ): Drain | undefined {
    const ms = drainMs(plan.card, launcherMs);
    const rule = trafficRule(plan.card, ENGINE_KINDS[plan.card.engine]!);
    if (ms > 0 && !rule) {
      say(
        "not drained: no traffic reading (an engine: command card without metrics:)",
      );
    }
    if (ms <= 0 || !rule) return undefined;
    const origin = engineOrigin(plan.host, plan.port);
    return new Drain(
      ms,
      (timeoutMs) => readEngineTraffic(origin, rule, plan.apiKey, timeoutMs),
      emit,
    );
  }

  constructor(
    ms: number,
    read: (timeoutMs: number) => Promise<TrafficReading | null>,
    emit: (event: DrainEvent) => void,
  ) {
    this.deadline = this.since + ms;
    void this.#loop(read, emit);
  }

  view(): NonNullable<EngineDetail["drain"]> {
    return {
      since: new Date(this.since).toISOString(),
      deadline: new Date(this.deadline).toISOString(),
      running: this.#last?.running ?? null,
      waiting: this.#last?.waiting ?? null,
    };
  }

  step(event: DrainEvent): DrainEnd | undefined {
    if (event.kind === "drain-over") return this.#end(event.why);
    const reading = event.reading;
    // A later failed read (an engine busy past 2 s) waits on: the deadline bounds it.
    if (reading === null) {
      return this.#last === null ? this.#end("unread") : undefined;
    }
    // A lower bound: what arrived and left between two reads is not seen.
    if (this.#last) {
      this.#finished += Math.max(0, inFlight(this.#last) - inFlight(reading));
    }
    this.#last = reading;
    return inFlight(reading) === 0 ? this.#end("drained") : undefined;
  }

  /** Ends the reads (the engine left `draining` some other way). */
  close(): void {
    this.#stop.abort();
    this.#over.resolve();
  }

  #end(reason: DrainEnd["reason"]): DrainEnd {
    this.close();
    const seconds = Math.round((Date.now() - this.since) / 100) / 10;
    const cut = this.#last ? inFlight(this.#last) : 0; // 0 when drained
    const n = this.#finished;
    const tally = `${n} request${n === 1 ? "" : "s"} finished, ${cut} cut`;
    const detail = reason === "unread"
      ? "not drained: its metrics could not be read"
      : reason === "drained"
      ? `drained in ${seconds} s: ${tally}`
      : reason === "deadline"
      ? `drain deadline passed after ${seconds} s: ${tally}`
      : `drain cut short by a second signal after ${seconds} s: ${tally}`;
    return { reason, detail, drain: { seconds, finished: n, cut } };
  }

  async #loop(
    read: (timeoutMs: number) => Promise<TrafficReading | null>,
    emit: (event: DrainEvent) => void,
  ): Promise<void> {
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      const left = this.deadline - Date.now();
      if (left <= 0) return emit({ kind: "drain-over", why: "deadline" });
      const reading = await read(Math.min(READ_TIMEOUT_MS, left));
      if (signal.aborted) return;
      if (reading === null && Date.now() >= this.deadline) continue;
      emit({ kind: "drain-read", reading });
      const wait = Math.min(READ_EVERY_MS, this.deadline - Date.now());
      await sleep(Math.max(wait, 0), signal);
    }
  }
}
