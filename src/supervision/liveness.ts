// The `--start-timeout` silence timer is a timer, not the health round (a round
// may be far longer than the timeout); it ends in a `silence` event.
import { log } from "../common/log.ts";
import { LogThrottle } from "../common/log_throttle.ts";
import type { Clock } from "../common/sleep.ts";
import type { HealthCheck, ServerProcess } from "../engines/server_process.ts";
import {
  pollVerdict,
  type RunHealth,
  silenceVerdict,
  type Verdict,
} from "./restart_policy.ts";

export class Liveness {
  #health: RunHealth = { firstOkAt: undefined, failures: 0 };
  #pollSeconds: number | undefined;
  #cancel: (() => void) | undefined;
  readonly #local = new LogThrottle({ write: log.warn });
  readonly #name: string;
  readonly #clock: Clock;
  readonly #o: { livenessFailures: number; startTimeoutMs: number };
  readonly #silence: (run: ServerProcess) => void;

  constructor(
    name: string,
    clock: Clock,
    options: { livenessFailures: number; startTimeoutMs: number },
    silence: (run: ServerProcess) => void,
  ) {
    [this.#name, this.#clock, this.#o] = [name, clock, options];
    this.#silence = silence;
  }

  get firstOkAt(): number | undefined {
    return this.#health.firstOkAt;
  }

  get pollSeconds(): number | undefined {
    return this.#pollSeconds;
  }

  /** A new run: no 200 yet, no failure counted; its silence timer armed. */
  spawned(run: ServerProcess): void {
    this.#health = { firstOkAt: undefined, failures: 0 };
    this.#arm(run, this.#o.startTimeoutMs);
  }

  exited(): void {
    this.#cancel?.();
  }

  /** A poll failing on the launcher's side (no file descriptor left) is logged, not counted. */
  poll(result: HealthCheck, counts: boolean): Verdict | undefined {
    this.#pollSeconds = result.ms / 1000;
    const name = this.#name;
    if (result.local) {
      // The key doubles as the summary's subject.
      this.#local.hit(
        `health polls of engine ${name} that failed on the launcher's side`,
        () =>
          `health poll of engine ${name} failed on the launcher's side, not counted against the engine: ${result.local}`,
      );
      return undefined;
    }
    const limit = this.#o.livenessFailures;
    const [now, old] = [this.#clock.now(), this.#health];
    const [verdict, health] = pollVerdict(old, result.ok, counts, limit, now);
    this.#health = health;
    return verdict;
  }

  /** The timer fired: stop when silent too long before a first 200, else wait the rest. */
  silent(run: ServerProcess): Verdict | undefined {
    if (this.#health.firstOkAt !== undefined) return undefined;
    const last = run.lastSignOfLife;
    const timeout = this.#o.startTimeoutMs;
    const now = this.#clock.now();
    const phase = run.watch.phase;
    const verdict = silenceVerdict(undefined, last, timeout, phase, now);
    if (!verdict) this.#arm(run, Math.max(last + timeout - now, 1));
    return verdict;
  }

  #arm(run: ServerProcess, ms: number): void {
    this.#cancel?.();
    this.#cancel = ms > 0
      ? this.#clock.schedule(() => this.#silence(run), ms)
      : undefined;
  }
}
