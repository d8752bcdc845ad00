/**
 * Shared test utilities: temporary root directories, a stand-in engine on PATH,
 * free ports, and the launcher CLI in a subprocess.
 */

import assert from "node:assert/strict";
import { configureLogging, type LogLevel } from "../../src/common/log.ts";
import type { EngineDetail } from "../../src/supervision/engine_detail.ts";

const MOD = new URL("../../mod.ts", import.meta.url).pathname;
const FAKE_ENGINE =
  new URL("../fixtures/fake_engine.ts", import.meta.url).pathname;

/** The stand-in engine's test catalogue (one card per behaviour). */
export const STAND_IN_CATALOGUE =
  new URL("../fixtures/stand_in.yaml", import.meta.url).pathname;

/**
 * Launcher flags for loopback, a port and a root directory, with a catalogue:
 * the stand-in one by default, `null` for the one shipped with the package.
 */
export function siteArgs(
  port: number,
  root: string,
  catalogue: string | null = STAND_IN_CATALOGUE,
): string[] {
  return [
    "--host",
    "127.0.0.1",
    "--port",
    String(port),
    "--directory",
    root,
    ...(catalogue === null ? [] : ["--catalogue", catalogue]),
  ];
}

/**
 * A root directory with `models/ logs/ metrics/ data/`, removed on dispose;
 * made in `dir` when given, else in the system's temp folder.
 */
export async function makeRoot(
  subdirs = ["models", "logs", "metrics", "data"],
  dir?: string,
): Promise<string> {
  const root = await Deno.makeTempDir({
    prefix: "serve-root-",
    ...(dir === undefined ? {} : { dir }),
  });
  for (const sub of subdirs) await Deno.mkdir(`${root}/${sub}`);
  return root;
}

/**
 * A directory of executables named `names`, each running the stand-in engine
 * with the current Deno binary (so it works when Deno itself is not on PATH).
 */
export async function fakeBin(
  names: string[] = ["vllm", "llama-server"],
): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "serve-bin-" });
  const script =
    `#!/bin/sh\nexec '${Deno.execPath()}' run -A --quiet '${FAKE_ENGINE}' "$@"\n`;
  for (const name of names) {
    await Deno.writeTextFile(`${dir}/${name}`, script, { mode: 0o755 });
  }
  return dir;
}

/** PATH with `dir` first. */
export function pathWith(dir: string): string {
  return `${dir}:${Deno.env.get("PATH") ?? ""}`;
}

function isFree(port: number): boolean {
  try {
    Deno.listen({ hostname: "127.0.0.1", port }).close();
    return true;
  } catch {
    return false;
  }
}

/** The one port of 10000–32000 that `fetch` refuses ("Requests to port 10080 are blocked"). */
const FETCH_BLOCKED_PORT = 10080;

/** A port p such that p .. p+count are all free on 127.0.0.1, none of them one `fetch` refuses. */
export function freePorts(count: number): number {
  for (let attempt = 0; attempt < 200; attempt++) {
    // Below Linux's ephemeral range (32768+), where outgoing connections could take a port first.
    const base = 10000 + Math.floor(Math.random() * (32000 - 10000 - count));
    // fetch refuses the Fetch standard's "bad ports"; 10080 is the one in this range.
    if (base <= FETCH_BLOCKED_PORT && FETCH_BLOCKED_PORT <= base + count) {
      continue;
    }
    let ok = true;
    for (let p = base; p <= base + count && ok; p++) ok = isFree(p);
    if (ok) return base;
  }
  throw new Error("no free port block found");
}

/** True when something accepts TCP connections on 127.0.0.1:port. */
export async function listening(port: number): Promise<boolean> {
  try {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    conn.close();
    return true;
  } catch {
    return false;
  }
}

/** True when `GET <base>/health` answers 2xx (the body always consumed). */
export async function healthOk(base: string): Promise<boolean> {
  try {
    const response = await fetch(`${base}/health`);
    await response.body?.cancel();
    return response.ok;
  } catch {
    return false;
  }
}

/**
 * The launcher's journal under `root` (`logs/events.jsonl`), one event a line:
 * none while there is no file yet, and a last line still being written left
 * out.
 */
export async function readJournal<T = Record<string, unknown>>(
  root: string,
): Promise<T[]> {
  const text = await Deno.readTextFile(`${root}/logs/events.jsonl`)
    .catch((error) => {
      if (error instanceof Deno.errors.NotFound) return "";
      throw error;
    });
  const whole = text.slice(0, text.lastIndexOf("\n") + 1);
  return whole.split("\n").filter(Boolean).map((line) => JSON.parse(line));
}

/**
 * The journal's engine state changes as `model:state` (`share1:ready`), in the
 * order the launcher made them: the order of events, with no clock read.
 */
export async function transitions(root: string): Promise<string[]> {
  return (await readJournal(root))
    .filter((e) => e.event === "state")
    .map((e) => `${e.model}:${e.to}`);
}

/**
 * Waits until the journal holds every `model:state` in `seen` (each as often
 * as it is listed), then returns its state changes ({@linkcode transitions}).
 */
export async function waitForTransitions(
  root: string,
  seen: string[],
  ms = 20_000,
): Promise<string[]> {
  let list: string[] = [];
  await waitFor(
    async () => {
      list = await transitions(root);
      return seen.every((one) =>
        list.filter((t) => t === one).length >=
          seen.filter((t) => t === one).length
      );
    },
    `${seen.join(", ")} in the journal`,
    ms,
  );
  return list;
}

/** Where the `n`th (from 1) `item` is in `list`, -1 if it is not there. */
export function nth(list: string[], item: string, n = 1): number {
  let seen = 0;
  return list.findIndex((one) => one === item && ++seen === n);
}

/** True while a process with this pid exists (zombies included). */
export function pidAlive(pid: number): boolean {
  try {
    Deno.kill(pid, "SIGCONT");
    return true;
  } catch {
    return false;
  }
}

/** Waits for `check` to be true, polling; throws with `what` after `ms`. */
export async function waitFor(
  check: () => boolean | Promise<boolean>,
  what: string,
  ms = 15_000,
): Promise<void> {
  // Monotonic: a test that steps the wall clock (Date.now) still waits its `ms`.
  const deadline = performance.now() + ms;
  while (!(await check())) {
    if (performance.now() > deadline) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * `promise`, or a failure naming `what` once `ms` have passed: a guard against
 * a hang (like {@linkcode waitFor}'s), far past what the promise needs.
 */
export async function withinGuard<T>(
  promise: Promise<T>,
  what: string,
  ms = 15_000,
): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const hang = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${what}: still waiting after ${ms} ms`)),
      ms,
    );
  });
  try {
    return await Promise.race([promise, hang]);
  } finally {
    clearTimeout(timer);
  }
}

/** GETs JSON from a URL, the body always consumed. */
export async function getJson(
  url: string,
  init?: RequestInit,
): Promise<{ status: number; body: unknown; headers: Headers }> {
  const response = await fetch(url, init);
  const text = await response.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // Not JSON: keep the text.
  }
  return { status: response.status, body, headers: response.headers };
}

/** The launcher CLI running in a subprocess, its stderr collected line by line. */
export class Launcher implements AsyncDisposable {
  readonly child: Deno.ChildProcess;
  readonly lines: string[] = [];
  readonly stdout: string[] = [];
  #done: Promise<unknown>;
  #status: Deno.CommandStatus | undefined;

  /**
   * @param args The launcher's arguments.
   * @param env Added to this process's environment.
   * @param permissions `deno run` permission flags; all of them by default.
   */
  constructor(
    args: string[],
    env: Record<string, string> = {},
    permissions: string[] = ["-A"],
  ) {
    this.child = new Deno.Command(Deno.execPath(), {
      args: ["run", ...permissions, "--quiet", MOD, ...args],
      env: { NO_COLOR: "1", ...env },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    this.#done = Promise.all([
      collect(this.child.stderr, this.lines),
      collect(this.child.stdout, this.stdout),
      this.child.status.then((s) => this.#status = s),
    ]);
  }

  /** The exit status once the process has exited. */
  get status(): Deno.CommandStatus | undefined {
    return this.#status;
  }

  /** Everything printed on stderr so far. */
  get stderr(): string {
    return this.lines.join("\n");
  }

  /** Waits for a stderr line matching `pattern`; fails early if the process exits. */
  async waitForLine(pattern: RegExp, ms = 20_000): Promise<string> {
    let found: string | undefined;
    await waitFor(
      () => {
        found = this.lines.find((l) => pattern.test(l));
        if (!found && this.#status) {
          throw new Error(
            `launcher exited (${this.#status.code}) before ${pattern}:\n${this.stderr}`,
          );
        }
        return found !== undefined;
      },
      `${pattern} in:\n${this.stderr}`,
      ms,
    );
    return found as string;
  }

  /** Waits until the management API listens. */
  ready(): Promise<string> {
    return this.waitForLine(/listening on /);
  }

  /** Sends a signal (if still running) and waits for exit and drained output. */
  async stop(signal: Deno.Signal = "SIGTERM"): Promise<Deno.CommandStatus> {
    if (!this.#status) {
      try {
        this.child.kill(signal);
      } catch {
        // Already exited.
      }
    }
    await this.#done;
    return this.#status as Deno.CommandStatus;
  }

  /** Waits for the process to exit by itself. */
  async exited(): Promise<Deno.CommandStatus> {
    await this.#done;
    return this.#status as Deno.CommandStatus;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}

async function collect(
  stream: ReadableStream<Uint8Array>,
  into: string[],
): Promise<void> {
  let rest = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    const parts = (rest + chunk).split("\n");
    rest = parts.pop() ?? "";
    into.push(...parts);
  }
  if (rest) into.push(rest);
}

/** Reads the stand-in engine's record for a port, if it wrote one. */
export async function readRecord(
  dir: string,
  port: number,
): Promise<
  | {
    argv: string[];
    pid: number;
    childPid?: number;
    /** When the stand-in started, `Date.now()` time. */
    startedAt: number;
    env: Record<string, string>;
  }
  | undefined
> {
  try {
    return JSON.parse(await Deno.readTextFile(`${dir}/${port}.json`));
  } catch {
    return undefined;
  }
}

/** Files in a directory (empty when it does not exist). */
export function listDir(dir: string): string[] {
  try {
    return [...Deno.readDirSync(dir)].map((e) => e.name).sort();
  } catch {
    return [];
  }
}

/** The engine records under `<root>/data/` (not the engines' compile caches, `data/cache/`). */
export function recordNames(root: string): string[] {
  return listDir(`${root}/data`).filter((name) => name !== "cache");
}

/** Runs `run` with log lines captured as `level: message`, then restores the logger. */
export async function captureLog<T>(
  run: () => T | Promise<T>,
): Promise<{ result: T; lines: string[] }> {
  const lines: string[] = [];
  const previous = configureLogging({
    level: "debug",
    sink: function capture(level: LogLevel, message: string): void {
      lines.push(`${level}: ${message}`);
    },
  });
  try {
    return { result: await run(), lines };
  } finally {
    configureLogging(previous);
  }
}

/** A launcher over stand-in engines, with its root and record directories. */
export interface Setup extends AsyncDisposable {
  root: string;
  /** The directory of stand-in executables first on the launcher's PATH. */
  bin: string;
  records: string;
  port: number;
  launcher: Launcher;
}

/** Starts the CLI for `models` on a free port block with stand-in engines. */
export async function launch(
  models: string[],
  options: {
    args?: string[];
    env?: Record<string, string>;
    root?: string;
    port?: number;
    catalogue?: string;
    /** Extra executables on PATH (name → shell script body). */
    bin?: Record<string, string>;
  } = {},
): Promise<Setup> {
  const root = options.root ?? await makeRoot();
  const bin = await fakeBin();
  for (const [name, script] of Object.entries(options.bin ?? {})) {
    await Deno.writeTextFile(`${bin}/${name}`, script, { mode: 0o755 });
  }
  const records = await Deno.makeTempDir({ prefix: "serve-rec-" });
  const port = options.port ?? freePorts(models.length);
  const launcher = new Launcher([
    ...models,
    ...siteArgs(port, root, options.catalogue ?? STAND_IN_CATALOGUE),
    ...(options.args ?? []),
  ], {
    PATH: pathWith(bin),
    FAKE_ENGINE_RECORD_DIR: records,
    NUCLEUS_MODE: "dev",
    ...options.env,
  });
  return {
    root,
    bin,
    records,
    port,
    launcher,
    async [Symbol.asyncDispose]() {
      await launcher.stop();
      for (const dir of [root, bin, records]) {
        await Deno.remove(dir, { recursive: true }).catch(() => {});
      }
    },
  };
}

/** The `GET /models` body. */
export interface ModelsBody {
  active: Record<
    string,
    { verb: string; url: string; healthy: boolean } & Partial<EngineDetail>
  >;
  catalogue: string[];
}

/** GETs `/models` (with `?detail=1` when asked), checking the status and type. */
export async function models(
  port: number,
  detail = false,
): Promise<ModelsBody> {
  const { status, body, headers } = await getJson(
    `http://127.0.0.1:${port}/models${detail ? "?detail=1" : ""}`,
  );
  assert.equal(status, 200);
  assert.equal(headers.get("content-type"), "application/json");
  return body as ModelsBody;
}

/**
 * Holds this process's PATH for the caller until dispose: test files run in
 * parallel in one process and share its environment, so the tests that put
 * stand-ins first on it take turns (an advisory lock on this file, which
 * every worker opens on its own), while the rest only ever read it.
 */
export async function holdPath(): Promise<AsyncDisposable> {
  const file = await Deno.open(new URL(import.meta.url), { read: true });
  await file.lock(true);
  const path = Deno.env.get("PATH") ?? "";
  return {
    async [Symbol.asyncDispose]() {
      Deno.env.set("PATH", path);
      await file.unlock();
      file.close();
    },
  };
}

/**
 * For launchers embedded in this process: `Semioserve` reset, a fresh root
 * directory, and stand-in engines first on this process's PATH (held with
 * {@linkcode holdPath}); dispose resets the launcher, restores PATH and
 * removes both directories.
 */
export async function inProcessSite(): Promise<
  { root: string } & AsyncDisposable
> {
  const { Semioserve } = await import("../../mod.ts");
  const held = await holdPath();
  await Semioserve.reset();
  const root = await makeRoot();
  const bin = await fakeBin();
  Deno.env.set("PATH", pathWith(bin));
  return {
    root,
    async [Symbol.asyncDispose]() {
      await Semioserve.reset();
      await held[Symbol.asyncDispose]();
      await Deno.remove(root, { recursive: true });
      await Deno.remove(bin, { recursive: true });
    },
  };
}

/** The pids of a process's children with the given command name (`/proc/<pid>/stat`'s comm). */
export function childrenNamed(parent: number, name: string): number[] {
  const out: number[] = [];
  for (const entry of Deno.readDirSync("/proc")) {
    const pid = Number(entry.name);
    if (!Number.isInteger(pid)) continue;
    try {
      const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
      const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid === parent && comm === name) out.push(pid);
    } catch { /* gone */ }
  }
  return out;
}
