// Whether a `ready` engine serves: once per health round, the engine's own
// metrics and, where its kind says, whether it sleeps; from them the pure
// rules of `engines/traffic.ts` give its traffic, a stall, or a canary due.
// What the engine run must act on comes back as events.
import { log } from "../common/log.ts";
import { type Clock, REAL_CLOCK, shownAt } from "../common/sleep.ts";
import {
  askEngine,
  engineOrigin,
  METRICS_MAX_BYTES,
} from "../engines/metrics_read.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";
import type { ServerProcess } from "../engines/server_process.ts";
import {
  batchTokens,
  beyondCanaries,
  canaryDue,
  type CanaryRequest,
  canaryRequest,
  parseTraffic,
  quietMark,
  resolved,
  stalled,
  stallMark,
  type Traffic,
  trafficOf,
  type TrafficReading,
} from "../engines/traffic.ts";
import type { EngineDetail } from "./engine_detail.ts";
import type { Journal } from "./journal.ts";
import type { EngineRunOptions } from "./engine_run_options.ts";
import type { EngineState } from "./engine_state.ts";
import { type SleepEvent, SleepWatch, type Watched } from "./sleep_watch.ts";
import { WakeCheck } from "./wake_check.ts";

export type ServingEvent =
  | SleepEvent
  | { readonly kind: "stalled"; readonly run: ServerProcess; seen: string }
  /** The launcher's wake of it failed and cannot succeed (vLLM stays asleep, wedged). */
  | { readonly kind: "wake-failed"; readonly run: ServerProcess; seen: string };

const READ_TIMEOUT_MS = 2_000;
// Asleep or waking it serves still: its traffic is read, no stall is judged.
const SERVING: readonly EngineState[] = ["ready", "sleeping", "waking"];
const CANARY_MAX_BYTES = 1024 * 1024;
const CANARY_FAILURES = 2;

export class ServingWatch {
  readonly #engine: Watched;
  readonly #canaryTimeoutMs: number;
  readonly #clock: Clock;
  readonly #journal: Journal | undefined;
  readonly #on: (event: ServingEvent) => void;
  readonly #signal: AbortSignal; // the engine stops for good
  #run: ServerProcess | undefined;
  #last: TrafficReading | null = null;
  #base: TrafficReading | null = null; // tokens/s is read since it
  #traffic: Traffic | null = null;
  #stall: TrafficReading | null = null;
  #quiet: TrafficReading | null = null;
  #canary: NonNullable<EngineDetail["canary"]> | null = null;
  #canaryFailures = 0;
  #canaryBusy = false;
  #sent = 0; // canaries sent since the last reading, the one in flight too
  #failing = false; // warned once, until the metrics read again
  readonly #said = new Set<string>(); // odd values and answers, each warned once
  #carried = 0; // generated tokens of earlier runs and before counter resets
  #generated = 0;
  #counted = false;
  /** Its kind's own sleep, from its lines (`sleep_watch.ts`). */
  readonly sleep: SleepWatch;
  readonly #wake: WakeCheck;

  constructor(
    engine: Watched,
    options: Pick<EngineRunOptions, "canaryTimeoutMs" | "journal" | "clock">,
    on: (event: ServingEvent) => void,
    signal: AbortSignal,
  ) {
    [this.#engine, this.#signal, this.#on] = [engine, signal, on];
    this.#canaryTimeoutMs = options.canaryTimeoutMs ?? 0;
    this.#clock = options.clock ?? REAL_CLOCK;
    this.#journal = options.journal;
    this.sleep = new SleepWatch(engine, options, on, (run) => this.woken(run));
    const stalled = (run: ServerProcess, seen: string) =>
      on({ kind: "stalled", run, seen });
    const o = { clock: this.#clock, journal: this.#journal };
    this.#wake = new WakeCheck(engine, o, stalled);
  }

  /** A wake of `run` ended now (its own line, or the launcher's wake): the engine must prove it (`wake_check.ts`). */
  woken(run: ServerProcess): void {
    this.#wake.woken(run);
  }

  detail(): Pick<EngineDetail, "traffic" | "canary" | "sleep"> {
    const serving = SERVING.includes(this.#engine.state);
    const traffic = serving ? this.#traffic : null;
    const view = this.sleep.view();
    const last_wake_check = this.#wake.view();
    const sleep = view && { ...view, last_wake_check };
    return { traffic, canary: this.#canary, sleep };
  }

  /** Over every run since the launcher started; undefined before a first reading. */
  get generatedTokens(): number | undefined {
    return this.#counted ? this.#carried + this.#generated : undefined;
  }

  inherit(old: ServingWatch): void {
    this.#counted = old.#counted;
    this.#carried = old.#carried + old.#generated;
    this.sleep.inherit(old.sleep);
  }

  async round(run: ServerProcess, state: EngineState): Promise<void> {
    const { plan, name } = this.#engine;
    const { card, traffic: rule } = plan;
    const signal = this.#signal;
    const began = this.#clock.now();
    if (run !== this.#run) {
      this.#carried += this.#generated;
      this.#generated = 0;
      this.#run = run;
      this.#forget();
      this.#canaryFailures = 0;
      this.#wake.reset();
    }
    this.sleep.round(run, state);
    if (!SERVING.includes(state)) return this.#forget();
    const kind = ENGINE_KINDS[card.engine];
    const origin = engineOrigin(run.plan.host, run.plan.port);
    const o = { apiKey: plan.apiKey, timeoutMs: READ_TIMEOUT_MS, signal };
    const ask = (path: string) =>
      askEngine(origin + path, { ...o, maxBytes: METRICS_MAX_BYTES });
    const sleep = kind?.traffic?.asleep;
    // The plan's `env` over its `baseEnv`, without copying the whole of it each round.
    const { env, baseEnv } = plan;
    const [slept, metrics] = await Promise.all([
      sleep && (!sleep.env || (env[sleep.env] ?? baseEnv[sleep.env]) === "1")
        ? ask(sleep.path)
        : undefined,
      rule ? ask(rule.path) : undefined,
    ]);
    if (run !== this.#run || signal.aborted) return;
    const said = slept?.ok ? isSleeping(slept.text) : undefined;
    if (said !== undefined) {
      const why = `${sleep!.path} says is_sleeping: ${said}`;
      this.#on({ kind: "sleep", run, asleep: said, why });
    }
    const asleep = said ?? state === "sleeping";
    if (!rule || !metrics) return;
    const read = metrics.ok
      ? parseTraffic(metrics.text, rule, this.#clock.now())
      : { reading: null, why: metrics.why, odd: [] };
    const at = `${origin}${rule.path}`;
    for (const odd of read.odd) this.#once(`its traffic at ${at}: ${odd}`);
    const reading = read.reading;
    const check = this.#wake.round(run, began, reading, asleep);
    if (check) void this.#wakeCanary(run, origin, check);
    if (!reading) {
      this.#forget();
      if (this.#failing) return;
      this.#failing = true;
      return log.warn(
        `engine ${name}: cannot read its traffic at ${at}: ${read.why} (traffic unknown; said once until it reads again)`,
      );
    }
    if (this.#failing) log.info(`engine ${name}: its traffic reads again`);
    this.#failing = false;
    if (reading.generated < this.#generated) this.#carried += this.#generated;
    this.#generated = reading.generated;
    this.#counted = true;
    const held = this.#traffic?.tokens_per_s ?? null;
    const shown = shownAt(this.#clock, reading.at);
    this.#traffic = trafficOf(this.#base, reading, held, shown);
    if (!this.#base || resolved(this.#base, reading)) this.#base = reading;
    // Proof of life forgives a failed canary: progress the canaries could not have made.
    if (this.#last && beyondCanaries(this.#last, reading, this.#sent)) {
      this.#canaryFailures = 0;
    }
    this.#sent = this.#canaryBusy ? 1 : 0;
    this.#last = reading;
    if (asleep || state !== "ready") {
      this.#stall = this.#quiet = reading;
      return;
    }
    this.#stall = stallMark(this.#stall, reading);
    const { stallMs } = plan;
    // Its token totals move only when a request ends: without the step counter, no stall can be told.
    const blind = rule.steps !== undefined && reading.steps === undefined;
    if (blind && stallMs > 0) {
      const counter = rule.steps!.counter;
      this.#once(
        `its traffic at ${at} has no ${counter}: no stall rule (its token counters move only when a request ends)`,
      );
    }
    const batch = batchTokens(card, rule);
    const stall = blind ? null : stalled(this.#stall, reading, stallMs, batch);
    if (stall !== null) return this.#on({ kind: "stalled", run, seen: stall });
    this.#quiet = quietMark(this.#quiet, reading);
    const canary = kind && canaryRequest(card, kind);
    const every = plan.canaryMs;
    // A failure stands until proof of life: the next is sent the next round.
    const due = this.#canaryFailures > 0
      ? every > 0 && reading.running + reading.waiting === 0
      : canaryDue(this.#quiet, reading, every);
    if (canary && !this.#canaryBusy && due) {
      void this.#send(run, origin + canary.path, canary.body);
    }
  }

  #once(what: string): void {
    if (this.#said.has(what)) return;
    this.#said.add(what);
    log.warn(`engine ${this.#engine.name}: ${what} (said once)`);
  }

  #forget(): void {
    this.#traffic = this.#last = this.#base = null;
    this.#stall = this.#quiet = null;
  }

  /** An answer, even a refusal (4xx), is life; no answer or a 5xx, twice in a row, is a stall. */
  async #send(run: ServerProcess, url: string, body: unknown): Promise<void> {
    const { name } = this.#engine;
    const signal = this.#signal;
    this.#canaryBusy = true;
    this.#sent++;
    const began = this.#clock.now();
    const { apiKey } = this.#engine.plan;
    const o = { apiKey, timeoutMs: this.#canaryTimeoutMs, body, signal };
    const answer = await askEngine(url, { ...o, maxBytes: CANARY_MAX_BYTES });
    this.#canaryBusy = false;
    if (run !== this.#run || signal.aborted) return;
    const at = this.#clock.now();
    const seconds = (at - began) / 1000;
    this.#canary = { at: shownAt(this.#clock, at), ok: answer.ok, seconds };
    // 501 Not Implemented is an answer (llama-server without --embeddings), not a hang.
    if (!answer.ok && answer.status === 501) {
      this.#once(`canary ${new URL(url).pathname} ${answer.why}`);
    }
    if (answer.ok || (answer.status ?? 500) < 500 || answer.status === 501) {
      this.#canaryFailures = 0;
      this.#quiet = null; // the next one a whole interval later
      return;
    }
    const n = ++this.#canaryFailures;
    const detail = `canary ${new URL(url).pathname} failed: ${answer.why}`;
    log.warn(`engine ${name} (pid ${run.pid}) ${detail} (${n} in a row)`);
    const entry = { model: name, event: "canary", reason: "failed", detail };
    this.#journal?.record(entry);
    if (n < CANARY_FAILURES || this.#engine.state !== "ready") return;
    const seen = `${n} canary requests in a row failed (${answer.why})`;
    this.#on({ kind: "stalled", run, seen });
  }

  async #wakeCanary(
    run: ServerProcess,
    origin: string,
    { path, body }: CanaryRequest,
  ): Promise<void> {
    const { apiKey } = this.#engine.plan;
    const [timeoutMs, signal] = [this.#canaryTimeoutMs, this.#signal];
    const o = { apiKey, timeoutMs, body, signal, maxBytes: CANARY_MAX_BYTES };
    const answer = await askEngine(origin + path, o);
    if (run === this.#run && !signal.aborted) {
      this.#wake.answered(run, path, answer);
    }
  }
}

/** `is_sleeping` of llama-server's `/props` or vLLM's `/is_sleeping`. */
function isSleeping(text: string): boolean | undefined {
  try {
    const value = JSON.parse(text)?.is_sleeping;
    return typeof value === "boolean" ? value : undefined;
  } catch {
    return undefined;
  }
}
