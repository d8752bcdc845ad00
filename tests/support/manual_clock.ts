/**
 * An engine run's seams for tests (`EngineRunOptions.clock`, `.spawn`): a
 * clock the test moves and process handles that spawn nothing.
 */
import type { Clock } from "../../src/common/sleep.ts";
import type { EnginePlan } from "../../src/engines/engine_plan.ts";
import type { EngineLog } from "../../src/engines/log_sink.ts";
import { ServerProcess } from "../../src/engines/server_process.ts";
import { waitFor } from "./helpers.ts";

/** Time that moves only when the test says: `advance` fires each timer due, in order. */
export class ManualClock implements Clock {
  #now = Date.parse("2026-01-01T00:00:00Z");
  #wallStep = 0;
  #timers: { at: number; callback: () => void }[] = [];

  now(): number {
    return this.#now;
  }

  /** The time shown: `now()` moved by every `stepWall`. */
  wall(): number {
    return this.#now + this.#wallStep;
  }

  /** Steps the wall clock alone, as NTP or a VM resume does: no timer fires, `now()` stays. */
  stepWall(ms: number): void {
    this.#wallStep += ms;
  }

  schedule(callback: () => void, ms: number): () => void {
    const timer = { at: this.#now + ms, callback };
    this.#timers.push(timer);
    return () => {
      this.#timers = this.#timers.filter((t) => t !== timer);
    };
  }

  /** Timers waiting. */
  get pending(): number {
    return this.#timers.length;
  }

  /** Waits (in real time) for a timer to be set, e.g. after a read over HTTP, then moves to it. */
  async next(what = "a timer"): Promise<void> {
    await waitFor(() => this.#timers.length > 0, what);
    const at = Math.min(...this.#timers.map((t) => t.at));
    await this.advance(at - this.#now);
  }

  /** Fires each timer due by `now() + ms`, in order; throws where timers keep coming (a loop that never waits). */
  async advance(ms: number): Promise<void> {
    const end = this.#now + ms;
    for (let fired = 0;; fired++) {
      if (fired > 1_000) throw new Error(`timers keep firing at ${this.#now}`);
      const due = this.#timers.filter((t) => t.at <= end)
        .sort((a, b) => a.at - b.at)[0];
      if (!due) break;
      this.#timers = this.#timers.filter((t) => t !== due);
      this.#now = due.at;
      due.callback();
      await settle();
    }
    this.#now = end;
  }
}

/** Lets the promise callbacks queued so far run (an exit's event). */
export function settle(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

let pids = 90_000;

/** A process handle the test drives: it spawns nothing, answers polls with `health` (503 while only `listening`), ends at `exit`. */
export class FakeProcess extends ServerProcess {
  readonly #clock: Clock;
  #pid: number | undefined;
  #startedAt: number | undefined;
  #wallStart: number | undefined;
  #status: Deno.CommandStatus | undefined;
  readonly #exit = Promise.withResolvers<Deno.CommandStatus>();
  health = false;
  listening = false;

  constructor(plan: EnginePlan, log: EngineLog, clock: Clock) {
    super(plan, log, clock);
    this.#clock = clock;
  }

  override start(): void {
    this.#pid = pids++;
    this.#startedAt = this.#clock.now();
    this.#wallStart = this.#clock.wall();
  }

  override get pid(): number | undefined {
    return this.#pid;
  }

  override get running(): boolean {
    return this.#pid !== undefined && this.#status === undefined;
  }

  override get startedAt(): number | undefined {
    return this.#wallStart;
  }

  override get spawnedAt(): number | undefined {
    return this.#startedAt;
  }

  override get lastSignOfLife(): number {
    return this.#startedAt ?? this.#clock.now();
  }

  override get ended(): Promise<Deno.CommandStatus> {
    return this.#exit.promise;
  }

  override check(): Promise<{ ok: boolean; answered: boolean; ms: number }> {
    const ok = this.running && this.health;
    const answered = ok || (this.running && this.listening);
    return Promise.resolve({ ok, answered, ms: 1 });
  }

  override async stop(): Promise<void> {
    this.exit({ success: false, code: 143, signal: "SIGTERM" });
    await this.ended;
  }

  override kill(): void {
    this.exit({ success: false, code: 137, signal: "SIGKILL" });
  }

  override async loadPolls(): Promise<void> {}

  /** Prints `line` (its kind's rules read it). */
  print(line: string): void {
    this.watch.feeder()(new TextEncoder().encode(`${line}\n`));
  }

  /** Ends the run, after printing `line`. */
  exit(status: Deno.CommandStatus, line?: string): void {
    if (this.#status || this.#pid === undefined) return;
    if (line) this.print(line);
    this.#status = status;
    this.#exit.resolve(status);
  }
}
