/**
 * The pure parts of the llama-server build's short output (`tools/llama_server.ts`):
 * reading make's progress counter out of the build's lines, deciding when a piped
 * run prints a progress line, and summarising a failed build from its log.
 *
 * ```ts
 * import { percentOf, progressLine } from "./build_progress.ts";
 *
 * percentOf("[ 42%] Building CXX object src/CMakeFiles/llama.dir/llama.cpp.o"); // 42
 * progressLine(42, 130_000); // "compiling llama-server: 42% (2m10s)"
 * ```
 *
 * @module
 */

/** How many of the log's last lines a failed build prints. */
export const TAIL_LINES = 40;

/** The tools a build runs whose absence a log can reveal; each is Debian's package of the same name. */
export type BuildTool = "cmake" | "g++" | "git" | "make";

/**
 * The percentage a line of build output announces, if any: the Makefiles cmake
 * generates print `[ 42%] Building CXX object …` and `[100%] Built target …`.
 *
 * @param line one line of the build's output
 * @returns 0 to 100, or undefined for any other line (gcc's warnings among them)
 * @example
 * ```ts
 * percentOf("[  7%] Building C object ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o"); // 7
 * percentOf("ggml.c:12:5: warning: unused variable 'x' [-Wunused-variable]"); // undefined
 * ```
 */
export function percentOf(line: string): number | undefined {
  const match = /^\[\s*(\d{1,3})%\]/.exec(line);
  return match ? Math.min(100, Number(match[1])) : undefined;
}

/**
 * The compile's progress after one more line: the highest percentage seen, since
 * parallel jobs (`-j`) can print their counters slightly out of order.
 *
 * @param percent the progress so far
 * @param line the next line of output
 * @returns the new progress, never below `percent`
 */
export function advance(percent: number, line: string): number {
  return Math.max(percent, percentOf(line) ?? 0);
}

/**
 * Whether a piped run (no terminal to rewrite a line on) prints a line for
 * `percent`: once each time the progress enters a new tenth.
 *
 * @param printed the percentage of the last printed line (0 before any)
 * @param percent the progress now
 * @example
 * ```ts
 * entersNewTenth(0, 9); // false
 * entersNewTenth(0, 12); // true
 * entersNewTenth(12, 19); // false
 * ```
 */
export function entersNewTenth(printed: number, percent: number): boolean {
  return Math.floor(percent / 10) > Math.floor(printed / 10);
}

/**
 * Elapsed time as people read it: `42s`, `6m05s`.
 *
 * @param ms milliseconds
 */
export function formatElapsed(ms: number): string {
  const total = Math.max(0, Math.floor(ms / 1000));
  const minutes = Math.floor(total / 60);
  const seconds = total % 60;
  return minutes === 0
    ? `${seconds}s`
    : `${minutes}m${String(seconds).padStart(2, "0")}s`;
}

/**
 * The one progress line of the compile (short, so that rewriting it in place
 * never wraps on a narrow terminal).
 *
 * @param percent make's counter
 * @param elapsedMs time since the compile began
 */
export function progressLine(percent: number, elapsedMs: number): string {
  return `compiling llama-server: ${percent}% (${formatElapsed(elapsedMs)})`;
}

/**
 * The last `count` lines of a log (a final newline does not count as an empty line).
 *
 * @param text the log
 * @param count how many lines
 */
export function lastLines(text: string, count: number = TAIL_LINES): string[] {
  const lines = text.split("\n");
  if (lines.at(-1) === "") lines.pop();
  return lines.slice(-count);
}

// Each cause as the tool itself words it, checked in this order: without make,
// cmake also says the compilers are "not set", so make comes first.
const MISSING_TOOL: ReadonlyArray<readonly [RegExp, BuildTool]> = [
  // cmake's configure step without make
  [/CMAKE_MAKE_PROGRAM is not set/, "make"],
  // cmake's configure step without a C or C++ compiler (g++ brings gcc too)
  [
    /No CMAKE_(?:C|CXX)_COMPILER could be found|CMAKE_(?:C|CXX)_COMPILER not set/,
    "g++",
  ],
  // gcc without its C++ front end, which comes with g++
  [/cannot execute '?cc1plus'?/, "g++"],
];

// A shell or make that cannot run a tool: `/bin/sh: 1: git: not found`,
// `make[2]: c++: No such file or directory`. The name must stand alone, so that
// `ops.cc: No such file or directory` (a missing source) does not count.
const NOT_FOUND =
  /(?:^|[\s:/])(cmake|g\+\+|c\+\+|gcc|cc|git|make|gmake): (?:command not found|not found|No such file or directory)/;

const PACKAGE_OF: Readonly<Record<string, BuildTool>> = {
  cmake: "cmake",
  "g++": "g++",
  "c++": "g++",
  gcc: "g++",
  cc: "g++",
  git: "git",
  make: "make",
  gmake: "make",
};

/**
 * The tool whose absence made a build step fail.
 *
 * @param lines the failed step's output
 * @returns the tool, which is also the Debian package to install; undefined when the cause is something else
 * @example
 * ```ts
 * missingTool(["CMake Error at CMakeLists.txt:2 (project):", "  No CMAKE_CXX_COMPILER could be found."]); // "g++"
 * ```
 */
export function missingTool(lines: readonly string[]): BuildTool | undefined {
  for (const [pattern, tool] of MISSING_TOOL) {
    if (lines.some((line) => pattern.test(line))) return tool;
  }
  for (const line of lines) {
    const name = NOT_FOUND.exec(line)?.[1];
    if (name !== undefined) return PACKAGE_OF[name];
  }
  return undefined;
}

/**
 * The line that opens a step's output in the log: where it ran and what.
 *
 * @param cwd the step's directory
 * @param command its command line
 */
export function stepHeader(cwd: string, command: string): string {
  return `$ cd ${cwd} && ${command}`;
}

/**
 * The last step's lines: the log from the last {@linkcode stepHeader} on, or
 * all of it when it has none.
 *
 * @param lines the log's lines
 */
export function lastStep(lines: readonly string[]): string[] {
  return lines.slice(
    Math.max(0, lines.findLastIndex((line) => line.startsWith("$ cd "))),
  );
}

/** A build step that exited non-zero, and where its output went. */
export interface StepFailure {
  /** The command line, as run. */
  readonly command: string;
  /** Its exit code. */
  readonly code: number;
  /** The log file's path. */
  readonly logPath: string;
  /** The log's text. */
  readonly log: string;
}

/** What a failed build prints: the log's tail, and the one-line error. */
export interface FailureSummary {
  /** The log's last {@linkcode TAIL_LINES} lines. */
  readonly tail: readonly string[];
  /** The missing tool, when that is the cause. */
  readonly tool: BuildTool | undefined;
  /** `Cannot build llama-server: …`, naming the step, the Debian package to install if any, and the log. */
  readonly message: string;
}

/**
 * Summarises a failed build step from its log. The cause is looked for in the
 * whole step's output, not only the tail: cmake names a missing compiler first,
 * then explains for dozens of lines.
 *
 * @param failure the step, its exit code and its log
 * @example
 * ```ts
 * const summary = summariseFailure({
 *   command: "cmake -S . -B build",
 *   code: 1,
 *   logPath: "/tmp/build.log",
 *   log: "  No CMAKE_CXX_COMPILER could be found.\n",
 * });
 * summary.message;
 * // "Cannot build llama-server: 'cmake -S . -B build' exited with 1: g++ is missing (Debian: apt-get install g++); the whole log is /tmp/build.log"
 * ```
 */
export function summariseFailure(failure: StepFailure): FailureSummary {
  const tail = lastLines(failure.log);
  const tool = missingTool(lastStep(failure.log.split("\n")));
  const cause = tool === undefined
    ? ""
    : `: ${tool} is missing (Debian: apt-get install ${tool})`;
  return {
    tail,
    tool,
    message:
      `Cannot build llama-server: '${failure.command}' exited with ${failure.code}${cause}; the whole log is ${failure.logPath}`,
  };
}
