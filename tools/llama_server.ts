/**
 * Builds llama.cpp's `llama-server` from the source that the npm package
 * `node-llama-cpp` ships as a git bundle, and caches it outside the checkout.
 *
 * ```sh
 * deno task engine:llama               # builds (or reuses) it; prints its path on the last line
 * deno task engine:llama --print-path  # prints the path, builds nothing (exit 1 if not built yet)
 * ```
 *
 * The build is idempotent: a finished build is reused at once; one interrupted
 * anywhere (Ctrl-C during the fetch, the clone or the compile) resumes: each
 * step's result counts only once whole, and cmake builds incrementally. The
 * cache lives in `$MYMODEL_CACHE`, else `$XDG_CACHE_HOME/mymodel-serve`, else
 * `~/.cache/mymodel-serve`.
 *
 * `buildLlamaServer({ cuda: true })` (used by `deno task gpu-check`) builds a
 * second, CUDA one (`-DGGML_CUDA=ON`, needs `nvcc`) in its own cache folder;
 * its source is cloned from `$LLAMA_CPP_SOURCE` (a llama.cpp git checkout or
 * bundle), else from the CPU build's source, else fetched as above.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { locateExecutable } from "../src/engines/launch.ts";
import {
  advance,
  entersNewTenth,
  formatElapsed,
  progressLine,
  stepHeader,
  summariseFailure,
} from "./build_progress.ts";

/** The one place the llama.cpp source is pinned: node-llama-cpp 3.22.1 ships llama.cpp de3ff81. */
export const NODE_LLAMA_CPP_VERSION = "3.22.1";

/** Where this project caches what it builds or generates outside the checkout. */
export function cacheDir(): string {
  const explicit = Deno.env.get("MYMODEL_CACHE");
  if (explicit) return explicit;
  const xdg = Deno.env.get("XDG_CACHE_HOME");
  const home = Deno.env.get("HOME");
  if (xdg) return `${xdg}/mymodel-serve`;
  if (home) return `${home}/.cache/mymodel-serve`;
  throw new Error(
    "Cannot find a cache directory: set MYMODEL_CACHE, XDG_CACHE_HOME or HOME",
  );
}

function buildRoot(cuda = false): string {
  return `${cacheDir()}/llama.cpp-${NODE_LLAMA_CPP_VERSION}${
    cuda ? "-cuda" : ""
  }`;
}

/** Path of the cached `llama-server` binary (it may not exist yet); `cuda`: the CUDA build's. */
export function llamaServerPath(cuda = false): string {
  return `${buildRoot(cuda)}/src/build/bin/llama-server`;
}

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

/** True when a finished build is in the cache; `cuda`: the CUDA build. */
export function isLlamaServerBuilt(cuda = false): boolean {
  return exists(`${buildRoot(cuda)}/BUILT`) && exists(llamaServerPath(cuda));
}

const TOOLS: Record<string, string> = {
  npm: "install Node.js (Debian: apt-get install nodejs npm)",
  tar: "apt-get install tar",
  git: "apt-get install git",
  cmake: "apt-get install cmake",
  "g++": "apt-get install g++",
  make: "apt-get install make",
};

/** A step's output: the log always, and this terminal too when verbose. */
interface StepOutput {
  readonly log: Deno.FsFile;
  readonly verbose: boolean;
  /** Each line of output, when not verbose (the compile reads make's counter). */
  readonly onLine?: (line: string) => void;
}

/** A build step that exited non-zero: its output is in the log. */
class StepFailed extends Error {
  override name = "StepFailed";
  readonly command: string;
  readonly code: number;
  constructor(command: string, code: number) {
    super(`Cannot build llama-server: '${command}' exited with ${code}`);
    this.command = command;
    this.code = code;
  }
}

function writeAll(
  to: { writeSync(p: Uint8Array): number },
  text: string,
): void {
  let bytes = new TextEncoder().encode(text);
  while (bytes.length > 0) bytes = bytes.subarray(to.writeSync(bytes));
}

/** Sends whole lines of a step's output where they go. */
function emit(text: string, output: StepOutput): void {
  writeAll(output.log, text);
  if (output.verbose) writeAll(Deno.stderr, text);
  else if (output.onLine) {
    for (const line of text.split("\n").slice(0, -1)) output.onLine(line);
  }
}

/** Copies a child's stream to the step's output by whole lines, so that its stdout and stderr interleave by line in the log. */
async function copyLines(
  stream: ReadableStream<Uint8Array>,
  output: StepOutput,
): Promise<void> {
  let partial = "";
  for await (const text of stream.pipeThrough(new TextDecoderStream())) {
    const pending = partial + text;
    const end = pending.lastIndexOf("\n") + 1;
    partial = pending.slice(end);
    if (end > 0) emit(pending.slice(0, end), output);
  }
  if (partial) emit(`${partial}\n`, output);
}

async function run(
  cmd: string,
  args: string[],
  cwd: string,
  output: StepOutput,
  signal?: AbortSignal,
): Promise<void> {
  const command = `${cmd} ${args.join(" ")}`;
  writeAll(output.log, `${stepHeader(cwd, command)}\n`);
  let child;
  try {
    child = new Deno.Command(cmd, {
      args,
      cwd,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      ...(signal ? { signal } : {}),
    }).spawn();
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
    throw new Error(
      `Cannot build llama-server: '${cmd}' is not on PATH (${
        TOOLS[cmd] ?? `install ${cmd}`
      })`,
      { cause: error },
    );
  }
  await Promise.all([
    copyLines(child.stdout, output),
    copyLines(child.stderr, output),
  ]);
  const { code } = await child.status;
  signal?.throwIfAborted();
  if (code !== 0) throw new StepFailed(command, code);
}

/**
 * Shows the compile's progress: one line rewritten in place on a terminal
 * (with a clock, since one file can take a minute), else a line each tenth.
 */
class CompileProgress implements Disposable {
  readonly #began = performance.now();
  readonly #terminal: boolean;
  readonly #timer: ReturnType<typeof setInterval> | undefined;
  #percent = 0;
  #printed = 0;

  constructor(terminal: boolean) {
    this.#terminal = terminal;
    if (terminal) {
      this.#timer = setInterval(() => this.#draw(), 1000);
      this.#draw();
    }
  }

  line(text: string): void {
    const before = this.#percent;
    this.#percent = advance(before, text);
    if (this.#terminal) {
      if (this.#percent !== before) this.#draw();
    } else if (entersNewTenth(this.#printed, this.#percent)) {
      this.#printed = this.#percent;
      say(progressLine(this.#percent, this.#elapsedMs()));
    }
  }

  #elapsedMs(): number {
    return performance.now() - this.#began;
  }

  #draw(): void {
    // \r back to the line's start, \x1b[K erases what a longer line left.
    writeAll(
      Deno.stderr,
      `\r[engine:llama] ${
        progressLine(this.#percent, this.#elapsedMs())
      }\x1b[K`,
    );
  }

  [Symbol.dispose](): void {
    if (!this.#terminal) return;
    clearInterval(this.#timer);
    writeAll(Deno.stderr, "\n");
  }
}

/** Said before compiling: llama.cpp's cmake then warns, in several lines, that it has no web UI. */
export const UI_NOTE =
  "expected: a cmake warning 'UI: no assets available - building without an embedded UI' (the launcher uses llama-server's API, not its web UI)";

function say(line: string): void {
  console.error(`[engine:llama] ${line}`);
}

/** Which `llama-server` to build, and how much of the build to show. */
export interface BuildOptions {
  /** Build with CUDA (`-DGGML_CUDA=ON`; needs `nvcc`), cached apart from the CPU build. */
  readonly cuda?: boolean;
  /** Aborting it kills the build step under way and rejects. */
  readonly signal?: AbortSignal;
  /**
   * Stream every line of cmake, make and the compilers to stderr instead of a
   * progress line (the log file is written either way).
   * @default {true when MYMODEL_BUILD_VERBOSE is 1}
   */
  readonly verbose?: boolean;
}

/** The environment variable that makes every build verbose (`--verbose` for one run). */
export const VERBOSE_ENV = "MYMODEL_BUILD_VERBOSE";

/** Path of the log that holds a build's whole output, beside the cached build; `cuda`: the CUDA build's. */
export function buildLogPath(cuda = false): string {
  return `${buildRoot(cuda)}/build.log`;
}

/**
 * Builds `llama-server` unless a finished build is cached; returns its path.
 *
 * Prints a few lines to stderr (what it fetches, the log's path, the compile's
 * progress, the result); the whole output of cmake, make and the compilers goes
 * to {@linkcode buildLogPath}. When a step fails it prints the log's last 40 lines.
 *
 * @param options CUDA or not; a signal bounding the build; verbose or not.
 * @throws {Error} naming the missing tool when npm, tar, git, cmake, g++ or make is absent;
 *   naming the failed step, the Debian package to install when a tool is missing, and the log.
 */
export async function buildLlamaServer(
  options: BuildOptions = {},
): Promise<string> {
  const cuda = options.cuda ?? false;
  const bin = llamaServerPath(cuda);
  if (isLlamaServerBuilt(cuda)) {
    say(`using the cached build at ${bin}`);
    return bin;
  }
  const tools = cuda
    ? { ...TOOLS, nvcc: "install the CUDA toolkit (nvcc)" }
    : TOOLS;
  for (const [tool, how] of Object.entries(tools)) {
    if (!locateExecutable(tool, Deno.env.get("PATH")).found) {
      throw new Error(
        `Cannot build llama-server: '${tool}' is not on PATH (${how})`,
      );
    }
  }
  const verbose = options.verbose ??
    /^(1|true)$/.test(Deno.env.get(VERBOSE_ENV) ?? "");
  const root = buildRoot(cuda);
  await Deno.mkdir(root, { recursive: true });
  const logPath = buildLogPath(cuda);
  const began = performance.now();
  say(
    verbose
      ? `building llama-server; its output follows and goes to ${logPath} too`
      : `building llama-server; its whole output goes to ${logPath} (--verbose or ${VERBOSE_ENV}=1 shows it here)`,
  );
  // A mark from an earlier build must not vouch for what this one leaves.
  await removeIfThere(`${root}/BUILT`);
  const log = await Deno.open(logPath, {
    write: true,
    create: true,
    truncate: true,
  });
  try {
    await buildSteps(root, cuda, { log, verbose }, options.signal);
  } catch (error) {
    if (!(error instanceof StepFailed)) throw error;
    const summary = summariseFailure({
      command: error.command,
      code: error.code,
      logPath,
      log: await Deno.readTextFile(logPath),
    });
    // A verbose run has just shown these lines.
    if (!verbose) {
      say(`the last ${summary.tail.length} lines of ${logPath}:`);
      console.error(summary.tail.join("\n"));
    }
    throw new Error(summary.message, { cause: error });
  } finally {
    log.close();
  }
  await Deno.writeTextFile(`${root}/BUILT`, `${new Date().toISOString()}\n`);
  say(`built ${bin} in ${formatElapsed(performance.now() - began)}`);
  return bin;
}

// Each step leaves its result whole or not at all, so that a build stopped
// anywhere (Ctrl-C, a kill) resumes: npm writes the package in a folder of its
// own, moved into place when whole; tar extracts again; an interrupted clone
// leaves a partial tree (git keeps what a checkout had written, see git's
// builtin/clone.c remove_junk), so only SOURCE, written after it, vouches for
// src/; cmake reconfigures and make resumes the compile; BUILT goes first and
// comes last.

/** The mark of a finished clone in `root`, naming where it came from. */
function sourceMark(root: string): string {
  return `${root}/SOURCE`;
}

/** Whether `root/src` holds a whole clone. */
function hasSource(root: string): boolean {
  return exists(sourceMark(root)) && exists(`${root}/src/CMakeLists.txt`);
}

async function removeIfThere(path: string): Promise<void> {
  await Deno.remove(path, { recursive: true }).catch((error) => {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
  });
}

/** Clones the source into `root/src` from `LLAMA_CPP_SOURCE`, the CPU build's source, else npm's bundle. */
async function fetchSource(
  root: string,
  cuda: boolean,
  output: StepOutput,
  signal: AbortSignal | undefined,
): Promise<void> {
  const cpu = buildRoot();
  const local = Deno.env.get("LLAMA_CPP_SOURCE") ??
    (cuda && (isLlamaServerBuilt() || hasSource(cpu))
      ? `${cpu}/src`
      : undefined);
  await removeIfThere(sourceMark(root));
  await removeIfThere(`${root}/src`);
  let from = local;
  const tgz = `${root}/node-llama-cpp-${NODE_LLAMA_CPP_VERSION}.tgz`;
  if (from === undefined) {
    say(
      `fetching node-llama-cpp@${NODE_LLAMA_CPP_VERSION} from npm (about 35 MB)`,
    );
    if (!exists(tgz)) {
      const fetching = `${root}/npm.partial`;
      await removeIfThere(fetching);
      await Deno.mkdir(fetching);
      await run(
        "npm",
        ["pack", "--silent", `node-llama-cpp@${NODE_LLAMA_CPP_VERSION}`],
        fetching,
        output,
        signal,
      );
      await Deno.rename(`${fetching}/${tgz.slice(root.length + 1)}`, tgz);
      await Deno.remove(fetching, { recursive: true });
    }
    await removeIfThere(`${root}/package`);
    await run(
      "tar",
      ["xzf", tgz, "package/llama/gitRelease.bundle"],
      root,
      output,
      signal,
    );
    from = "package/llama/gitRelease.bundle";
    say("cloning the llama.cpp source out of the bundle");
  } else say(`cloning the llama.cpp source from ${local}`);
  await run(
    "git",
    ["-c", "advice.detachedHead=false", "clone", "-q", from, "src"],
    root,
    output,
    signal,
  );
  await Deno.writeTextFile(sourceMark(root), `${from}\n`);
  await removeIfThere(`${root}/package`);
  await removeIfThere(tgz);
}

/** Fetches the source unless a whole clone is there, configures and compiles; every step's output goes to `output`. */
async function buildSteps(
  root: string,
  cuda: boolean,
  output: StepOutput,
  signal: AbortSignal | undefined,
): Promise<void> {
  if (!hasSource(root)) await fetchSource(root, cuda, output, signal);
  const src = `${root}/src`;
  say("configuring with cmake");
  // Only a verbose run shows cmake's warnings; the log carries the note either way.
  if (output.verbose) say(UI_NOTE);
  writeAll(output.log, `# ${UI_NOTE}\n`);
  await run(
    "cmake",
    [
      "-S",
      ".",
      "-B",
      "build",
      "-DCMAKE_BUILD_TYPE=Release",
      "-DLLAMA_CURL=OFF",
      "-DLLAMA_OPENSSL=OFF",
      "-DGGML_NATIVE=ON",
      "-DLLAMA_BUILD_TESTS=OFF",
      "-DLLAMA_BUILD_EXAMPLES=OFF",
      // The launcher uses llama-server's API, not its web UI: do not try to
      // download the UI (the download fails where only npm is reachable).
      // Only builds that run anyway see this: the cache is keyed on BUILT alone.
      "-DLLAMA_USE_PREBUILT_UI=OFF",
      // With GGML_NATIVE, ggml compiles the kernels for this machine's GPUs.
      ...(cuda ? ["-DGGML_CUDA=ON"] : []),
    ],
    src,
    output,
    signal,
  );
  const jobs = String(navigator.hardwareConcurrency || 2);
  say(
    `compiling llama-server${
      cuda ? " with CUDA" : ""
    } with ${jobs} jobs (about 6 minutes on 2 cores the first time${
      cuda ? ", more for the CUDA kernels" : ""
    })`,
  );
  using progress = output.verbose
    ? undefined
    : new CompileProgress(Deno.stderr.isTerminal());
  await run(
    "cmake",
    ["--build", "build", "--target", "llama-server", "-j", jobs],
    src,
    progress ? { ...output, onLine: (line) => progress.line(line) } : output,
    signal,
  );
}

const USAGE = `Usage: deno task engine:llama [--print-path] [--verbose]

Builds llama.cpp's llama-server once into ${"$"}MYMODEL_CACHE (else
${"$"}XDG_CACHE_HOME/mymodel-serve, else ~/.cache/mymodel-serve) and prints its path.
A build shows one progress line; cmake's, make's and the compilers' output goes
to build.log beside the build, and a failed build prints the log's last lines.

  --print-path   print the path of the cached llama-server and build nothing;
                 exit 1 when it is not built yet
  --verbose      show the build's whole output here too (or ${VERBOSE_ENV}=1)
  -h, --help     print this help
`;

/** Runs the tool; returns the exit code. */
async function main(args: string[]): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args,
      strict: true,
      options: {
        "print-path": { type: "boolean", default: false },
        verbose: { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
    }));
  } catch (error) {
    console.error(
      `engine:llama: ${(error as Error).message.split("\n")[0]}\n\n${USAGE}`,
    );
    return 2;
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  if (values["print-path"]) {
    const bin = llamaServerPath();
    if (!isLlamaServerBuilt()) {
      console.error(
        `Cannot print the path of llama-server: it is not built yet at ${bin} (expected a finished build: run deno task engine:llama)`,
      );
      return 1;
    }
    console.log(bin);
    return 0;
  }
  console.log(
    await buildLlamaServer(values.verbose ? { verbose: true } : {}),
  );
  return 0;
}

if (import.meta.main) {
  try {
    Deno.exit(await main(Deno.args));
  } catch (error) {
    console.error(error instanceof Error ? error.message : String(error));
    Deno.exit(1);
  }
}
