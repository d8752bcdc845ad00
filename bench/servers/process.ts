/**
 * A benchmarked subprocess (the launcher CLI or the bare server): its stderr
 * lines time-stamped as they arrive, its RSS, and a timed stop.
 *
 * @module
 */

/** One stderr line and when it arrived (`performance.now()` milliseconds). */
export interface Line {
  text: string;
  at: number;
}

/** How a stop went. */
export interface StopResult {
  /** Milliseconds from the signal to the exit status. */
  ms: number;
  status: Deno.CommandStatus;
  /** True when the process outlived the wait and had to be SIGKILLed. */
  forced: boolean;
}

/** Engine pids as the launcher logs them: `engine NAME (KIND) started, pid N, ...`. */
const ENGINE_STARTED = /engine \S+ \(\S+\) started, pid (\d+)/;

/**
 * A subprocess whose stderr is collected line by line. Disposing it stops it:
 * SIGTERM, then SIGKILL (and SIGKILL to every engine group it logged) when it
 * does not exit in time.
 */
export class Child implements AsyncDisposable {
  static #live = new Set<Child>();

  /** Stops every child that has not exited yet (for an interrupted run). */
  static async stopAll(): Promise<void> {
    await Promise.all([...Child.#live].map((child) => child.stop()));
  }

  /** A label for messages. */
  readonly name: string;
  /** `performance.now()` just before the spawn. */
  readonly spawnedAt: number;
  /** Every stderr line so far. */
  readonly lines: Line[] = [];
  #child: Deno.ChildProcess;
  #status: Deno.CommandStatus | undefined;
  #ended = false;
  #done: Promise<void>;
  #waiters = new Set<() => void>();

  /**
   * Spawns `command args...` with stdin and stdout closed and stderr piped.
   *
   * @param name A label for messages.
   * @param command The executable.
   * @param args Its arguments.
   * @param env Extra environment variables.
   */
  constructor(
    name: string,
    command: string,
    args: readonly string[],
    env: Record<string, string> = {},
  ) {
    this.name = name;
    this.spawnedAt = performance.now();
    this.#child = new Deno.Command(command, {
      args: [...args],
      env,
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
    Child.#live.add(this);
    this.#done = Promise.all([
      this.#collect(this.#child.stderr),
      this.#child.status.then((status) => {
        this.#status = status;
      }),
    ]).then(() => {
      Child.#live.delete(this);
      this.#ended = true;
      this.#notify();
    });
  }

  /** The process id. */
  get pid(): number {
    return this.#child.pid;
  }

  /** The exit status once the process has exited. */
  get status(): Deno.CommandStatus | undefined {
    return this.#status;
  }

  /** The last stderr lines, for error messages. */
  tail(count = 15): string {
    return this.lines.slice(-count).map((l) => `  ${l.text}`).join("\n");
  }

  /**
   * Waits for a stderr line matching `pattern`.
   *
   * @returns The line and its arrival time.
   * @throws {Error} When the process ends first or `ms` passes.
   */
  waitForLine(pattern: RegExp, ms = 30_000): Promise<Line> {
    const { promise, resolve, reject } = Promise.withResolvers<Line>();
    const finish = () => {
      clearTimeout(timer);
      this.#waiters.delete(check);
    };
    const check = () => {
      const found = this.lines.find((l) => pattern.test(l.text));
      if (found) {
        finish();
        resolve(found);
      } else if (this.#ended) {
        finish();
        reject(
          new Error(
            `${this.name} exited (${
              describe(this.#status)
            }) before printing ${pattern}:\n${this.tail()}`,
          ),
        );
      }
    };
    const timer = setTimeout(() => {
      finish();
      reject(
        new Error(
          `${this.name} did not print ${pattern} within ${ms} ms:\n${this.tail()}`,
        ),
      );
    }, ms);
    this.#waiters.add(check);
    check();
    return promise;
  }

  /**
   * The resident set size from `/proc/PID/status`.
   *
   * @returns VmRSS in KiB.
   * @throws {Error} When the process is gone or the field is missing.
   */
  rssKiB(): number {
    const status = Deno.readTextFileSync(`/proc/${this.pid}/status`);
    const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
    if (!match?.[1]) {
      throw new Error(`Cannot read VmRSS of ${this.name} (pid ${this.pid})`);
    }
    return Number(match[1]);
  }

  /**
   * CPU time used so far by every thread of the process (user + system), from
   * `/proc/PID/stat`, in 10 ms clock ticks.
   *
   * @returns Seconds.
   * @throws {Error} When the process is gone.
   */
  cpuSeconds(): number {
    const stat = Deno.readTextFileSync(`/proc/${this.pid}/stat`);
    // Fields after the parenthesised command name: state is index 0, utime 11, stime 12.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const ticks = Number(fields[11]) + Number(fields[12]);
    if (!Number.isFinite(ticks)) {
      throw new Error(`Cannot read CPU time of ${this.name} (pid ${this.pid})`);
    }
    return ticks / 100;
  }

  /**
   * Sends `signal` and waits for the exit; SIGKILLs after `ms`.
   *
   * @returns The time from signal to exit, the status, and whether SIGKILL was needed.
   */
  async stop(
    signal: Deno.Signal = "SIGTERM",
    ms = 20_000,
  ): Promise<StopResult> {
    if (this.#status) {
      await this.#done;
      if (!this.#status.success) this.#killEngineGroups();
      return { ms: 0, status: this.#status, forced: false };
    }
    const start = performance.now();
    this.#kill(signal);
    const status = this.#child.status;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<"late">((resolve) => {
      timer = setTimeout(() => resolve("late"), ms);
    });
    const first = await Promise.race([status, late]);
    clearTimeout(timer);
    const end = performance.now();
    let forced = false;
    if (first === "late") {
      forced = true;
      this.#kill("SIGKILL");
      this.#killEngineGroups();
    }
    const final = await status;
    await this.#done;
    if (forced || !final.success) this.#killEngineGroups();
    return { ms: end - start, status: final, forced };
  }

  /** Stops the process (see {@linkcode Child.stop}). */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop("SIGTERM", 15_000);
  }

  #kill(signal: Deno.Signal): void {
    try {
      this.#child.kill(signal);
    } catch {
      // Already exited.
    }
  }

  /** Last resort after an unclean exit: engines run in their own process groups. */
  #killEngineGroups(): void {
    for (const line of this.lines) {
      const pid = Number(ENGINE_STARTED.exec(line.text)?.[1] ?? 0);
      if (pid > 1) {
        try {
          Deno.kill(-pid, "SIGKILL");
        } catch {
          // The group is already gone.
        }
      }
    }
  }

  #notify(): void {
    for (const check of [...this.#waiters]) check();
  }

  async #collect(stream: ReadableStream<Uint8Array>): Promise<void> {
    let rest = "";
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      const at = performance.now();
      const parts = (rest + chunk).split("\n");
      rest = parts.pop() ?? "";
      for (const text of parts) this.lines.push({ text, at });
      if (parts.length > 0) this.#notify();
    }
    if (rest) this.lines.push({ text: rest, at: performance.now() });
  }
}

function describe(status: Deno.CommandStatus | undefined): string {
  if (!status) return "running";
  return status.signal ? `signal ${status.signal}` : `code ${status.code}`;
}
