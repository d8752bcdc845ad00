/**
 * One scenario's processes and their cleanup: the launchers it ran (the real
 * CLI, `mod.ts`), the processes it started outside them, and every engine pid
 * seen. Closing it stops them all and waits until the checked GPU lists none
 * of them: a scenario, passed or failed, leaves no engine and no GPU memory
 * behind, or says what it left.
 *
 * @module
 */
import { stringify } from "yaml";
import { sleep } from "../../src/common/sleep.ts";
import type { ActiveModel } from "../../src/http/handler.ts";
import type { EngineDetail } from "../../src/supervision/engine_detail.ts";
import { Launcher, siteArgs } from "../../tests/support/helpers.ts";
import type { EngineRecord, GpuWorld } from "./world.ts";

/** Polls `probe` every `everyMs` until it returns a value (not undefined), or undefined after `ms`. */
export async function until<T>(
  probe: () => Promise<T | undefined> | T | undefined,
  ms: number,
  everyMs = 100,
): Promise<T | undefined> {
  const end = performance.now() + ms;
  while (true) {
    const value = await probe();
    if (value !== undefined) return value;
    if (performance.now() >= end) return undefined;
    await sleep(everyMs);
  }
}

/** Alive and not a zombie. */
export function alive(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return !stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z");
  } catch {
    return false;
  }
}

function signalGroup(pid: number, signal: Deno.Signal): void {
  for (const target of [-pid, pid]) {
    try {
      Deno.kill(target, signal);
    } catch {
      // Gone already, or not a group leader.
    }
  }
}

/** One engine of `GET /models?detail=1`, the fields the check reads. */
export type EngineSeen =
  & Pick<ActiveModel, "url" | "healthy">
  & Pick<EngineDetail, "state" | "pid" | "waiting_for">;

/** The launcher CLI in a subprocess (tests/support's {@linkcode Launcher}), on `port`. */
export class CheckLauncher extends Launcher {
  readonly port: number;

  constructor(
    args: string[],
    env: Record<string, string>,
    port: number,
  ) {
    super(args, env);
    this.port = port;
  }

  /** The engines by name, or undefined while the API does not answer. */
  async engines(): Promise<Record<string, EngineSeen> | undefined> {
    try {
      const response = await fetch(
        `http://127.0.0.1:${this.port}/models?detail=1`,
        { signal: AbortSignal.timeout(3000) },
      );
      if (!response.ok) {
        await response.body?.cancel();
        return undefined;
      }
      return (await response.json()).active;
    } catch {
      return undefined;
    }
  }

  /** Sends `signal` (if it runs) and waits, SIGKILL after `ms`. */
  override async stop(
    signal: Deno.Signal = "SIGTERM",
    ms = 30_000,
  ): Promise<Deno.CommandStatus> {
    const timer = setTimeout(() => {
      try {
        this.child.kill("SIGKILL");
      } catch {
        // Exited meanwhile.
      }
    }, ms);
    try {
      return await super.stop(signal);
    } finally {
      clearTimeout(timer);
    }
  }
}

/** A failed expectation: what was expected, what was seen. */
export class Unmet extends Error {
  constructor(readonly expected: string, readonly saw: string) {
    super(`expected ${expected}; saw ${saw}`);
  }
}

/** Throws {@linkcode Unmet} unless `ok`. */
export function expect(ok: boolean, expected: string, saw: string): void {
  if (!ok) throw new Unmet(expected, saw);
}

/** A scenario's processes, stopped and checked on close. */
export class Scope {
  readonly world: GpuWorld;
  readonly root: string;
  /** Launcher flags every launch passes (after the site and `--gpus`). */
  readonly #launcherArgs: readonly string[];
  readonly #launchers: CheckLauncher[] = [];
  readonly #children: Deno.ChildProcess[] = [];
  /** Every pid this scenario started (engines seen in records, processes it spawned). */
  readonly #pids = new Set<number>();

  constructor(
    world: GpuWorld,
    root: string,
    launcherArgs: readonly string[] = [],
  ) {
    this.world = world;
    this.root = root;
    this.#launcherArgs = launcherArgs;
  }

  /**
   * Runs the launcher for `names` of `cards` on the checked GPU with the
   * scope's launcher flags, then `args`, and the world's environment with
   * `env`; engine i listens on `port + i`.
   */
  async launch(
    cards: Record<string, unknown>,
    names: string[],
    port: number,
    args: readonly string[] = [],
    env: Readonly<Record<string, string>> = {},
  ): Promise<CheckLauncher> {
    const catalogue = `${this.root}/catalogue.yaml`;
    await Deno.writeTextFile(catalogue, stringify({ models: cards }));
    const launcher = new CheckLauncher(
      [
        ...names,
        ...siteArgs(port, this.root, catalogue),
        "--gpus",
        this.world.gpu.index,
        ...this.#launcherArgs,
        ...args,
      ],
      { ...this.world.env, ...env },
      port,
    );
    this.#launchers.push(launcher);
    return launcher;
  }

  /** Starts a process outside the launcher on the checked GPU, in its own group. */
  spawn(command: string[]): Deno.ChildProcess {
    const child = new Deno.Command(command[0]!, {
      args: command.slice(1),
      env: { ...this.world.env, CUDA_VISIBLE_DEVICES: this.world.gpu.index },
      stdin: "null",
      stdout: "null",
      stderr: "null",
      detached: true,
    }).spawn();
    this.#children.push(child);
    this.#pids.add(child.pid);
    return child;
  }

  /** An engine pid seen (`?detail=1`), for cleanup: one that writes no record. */
  note(pid: number): void {
    this.#pids.add(pid);
  }

  /** The record of the engine on `port`, noting its pid for cleanup. */
  async record(port: number): Promise<EngineRecord | undefined> {
    try {
      const record = JSON.parse(
        await Deno.readTextFile(`${this.world.records}/${port}.json`),
      ) as EngineRecord;
      this.#pids.add(record.pid);
      return record;
    } catch {
      return undefined;
    }
  }

  /**
   * Stops every launcher (SIGTERM, then SIGKILL), kills what is left of
   * every pid seen, and waits until the GPU lists none of them.
   *
   * @returns What was left behind, or an empty list.
   */
  async close(releaseBoundMs: number): Promise<string[]> {
    await Promise.all(this.#launchers.map((l) => l.stop("SIGTERM", 20_000)));
    for (const child of this.#children) signalGroup(child.pid, "SIGKILL");
    await Promise.all(this.#children.map((c) => c.status));
    // Engines from records: a killed launcher's watchdog may still be at work.
    await until(() => [...this.#pids].some(alive) ? undefined : true, 15_000);
    const left: string[] = [];
    for (const pid of this.#pids) {
      if (!alive(pid)) continue;
      signalGroup(pid, "SIGKILL");
      left.push(`pid ${pid} still running at cleanup (killed)`);
    }
    // A failed query counts as one listing nothing.
    let ours: [number, number][] = [];
    const cleared = await until(
      async () => {
        const now = await this.world.listed();
        ours = [...(now ?? new Map())].filter(([pid]) => this.#pids.has(pid));
        return ours.length === 0 ? true : undefined;
      },
      releaseBoundMs,
      250,
    );
    if (cleared === undefined) {
      left.push(
        `GPU ${this.world.gpu.index} still lists ${
          ours.map(([pid, mib]) => `pid ${pid} (${mib} MiB)`).join(", ")
        } ${releaseBoundMs / 1000} s after cleanup`,
      );
    }
    return left;
  }
}
