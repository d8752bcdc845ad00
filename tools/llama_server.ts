/**
 * Builds llama.cpp's `llama-server` from the source that the npm package
 * `node-llama-cpp` ships as a git bundle, and caches it outside the checkout.
 *
 * ```sh
 * deno task engine:llama               # builds (or reuses) it; prints its path on the last line
 * deno task engine:llama --print-path  # prints the path, builds nothing (exit 1 if not built yet)
 * ```
 *
 * The build is idempotent: a finished build is reused at once; an interrupted one
 * resumes (cmake builds incrementally). The cache lives in `$MYMODEL_CACHE`, else
 * `$XDG_CACHE_HOME/mymodel-serve`, else `~/.cache/mymodel-serve`.
 *
 * `buildLlamaServer({ cuda: true })` (used by `deno task gpu-check`) builds a
 * second, CUDA one (`-DGGML_CUDA=ON`, needs `nvcc`) in its own cache folder;
 * its source is cloned from `$LLAMA_CPP_SOURCE` (a llama.cpp git checkout or
 * bundle), else from the CPU build's source, else fetched as above.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { findExecutable } from "../src/engines/launch.ts";

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

async function run(
  cmd: string,
  args: string[],
  cwd: string,
  quiet = false,
  signal?: AbortSignal,
): Promise<void> {
  const stdio = quiet ? "null" : "inherit";
  const { code } = await new Deno.Command(cmd, {
    args,
    cwd,
    stdin: "null",
    stdout: stdio,
    stderr: "inherit",
    ...(signal ? { signal } : {}),
  }).output();
  signal?.throwIfAborted();
  if (code !== 0) {
    throw new Error(
      `Cannot build llama-server: '${cmd} ${
        args.join(" ")
      }' exited with ${code}`,
    );
  }
}

/** Said before compiling: llama.cpp's cmake then warns, in several lines, that it has no web UI. */
export const UI_NOTE =
  "expected: a cmake warning 'UI: no assets available - building without an embedded UI' (the launcher uses llama-server's API, not its web UI)";

function say(line: string): void {
  console.error(`[engine:llama] ${line}`);
}

/** Which `llama-server` to build. */
export interface BuildOptions {
  /** Build with CUDA (`-DGGML_CUDA=ON`; needs `nvcc`), cached apart from the CPU build. */
  readonly cuda?: boolean;
  /** Aborting it kills the build step under way and rejects. */
  readonly signal?: AbortSignal;
}

/**
 * Builds `llama-server` unless a finished build is cached; returns its path.
 *
 * @param options CUDA or not; a signal bounding the build.
 * @throws {Error} naming the missing tool when npm, tar, git, cmake, g++ or make is absent.
 */
export async function buildLlamaServer(
  options: BuildOptions = {},
): Promise<string> {
  const cuda = options.cuda ?? false;
  const signal = options.signal;
  const bin = llamaServerPath(cuda);
  if (isLlamaServerBuilt(cuda)) {
    say(`using the cached build at ${bin}`);
    return bin;
  }
  const tools = cuda
    ? { ...TOOLS, nvcc: "install the CUDA toolkit (nvcc)" }
    : TOOLS;
  for (const [tool, how] of Object.entries(tools)) {
    if (!findExecutable(tool, Deno.env.get("PATH"))) {
      throw new Error(
        `Cannot build llama-server: '${tool}' is not on PATH (${how})`,
      );
    }
  }
  const root = buildRoot(cuda);
  const src = `${root}/src`;
  await Deno.mkdir(root, { recursive: true });
  const local = Deno.env.get("LLAMA_CPP_SOURCE") ??
    (cuda && exists(`${buildRoot()}/src/CMakeLists.txt`)
      ? `${buildRoot()}/src`
      : undefined);
  if (!exists(`${src}/CMakeLists.txt`) && local !== undefined) {
    say(`cloning the llama.cpp source from ${local}`);
    await Deno.remove(src, { recursive: true }).catch(() => {});
    await run("git", ["clone", "-q", local, "src"], root, true, signal);
  }
  if (!exists(`${src}/CMakeLists.txt`)) {
    say(
      `fetching node-llama-cpp@${NODE_LLAMA_CPP_VERSION} from npm (about 35 MB)`,
    );
    const tgz = `${root}/node-llama-cpp-${NODE_LLAMA_CPP_VERSION}.tgz`;
    if (!exists(tgz)) {
      await run(
        "npm",
        [
          "pack",
          "--silent",
          `node-llama-cpp@${NODE_LLAMA_CPP_VERSION}`,
        ],
        root,
        true,
      );
    }
    await run("tar", ["xzf", tgz, "package/llama/gitRelease.bundle"], root);
    await Deno.remove(src, { recursive: true }).catch(() => {});
    say("cloning the llama.cpp source out of the bundle");
    await run("git", [
      "-c",
      "advice.detachedHead=false",
      "clone",
      "-q",
      "package/llama/gitRelease.bundle",
      "src",
    ], root);
    await Deno.remove(`${root}/package`, { recursive: true });
    await Deno.remove(tgz);
  }
  say("configuring with cmake");
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
    true,
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
  say(UI_NOTE);
  await run(
    "cmake",
    ["--build", "build", "--target", "llama-server", "-j", jobs],
    src,
    false,
    signal,
  );
  await Deno.writeTextFile(`${root}/BUILT`, `${new Date().toISOString()}\n`);
  say(`built ${bin}`);
  return bin;
}

const USAGE = `Usage: deno task engine:llama [--print-path]

Builds llama.cpp's llama-server once into ${"$"}MYMODEL_CACHE (else
${"$"}XDG_CACHE_HOME/mymodel-serve, else ~/.cache/mymodel-serve) and prints its path.

  --print-path   print the path of the cached llama-server and build nothing;
                 exit 1 when it is not built yet
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
  console.log(await buildLlamaServer());
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
