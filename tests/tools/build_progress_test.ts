/**
 * The llama-server build's short output, as pure functions: make's counter read
 * from a recorded build, the progress lines a piped run prints, and the summary
 * of a failed build (its log's tail and the missing tool's Debian package).
 */
import assert from "node:assert/strict";
import {
  advance,
  entersNewTenth,
  formatElapsed,
  lastLines,
  lastStep,
  missingTool,
  percentOf,
  progressLine,
  stepHeader,
  summariseFailure,
  TAIL_LINES,
} from "../../tools/build_progress.ts";
import {
  CONFIGURE_WITHOUT_C_COMPILER,
  MAKE_OUTPUT,
} from "../fixtures/llama_build_output.ts";

Deno.test("make's counter is read from its own lines, and from no gcc warning", () => {
  assert.equal(
    percentOf(
      "[ 12%] Building CXX object src/CMakeFiles/llama.dir/llama.cpp.o",
    ),
    12,
  );
  assert.equal(
    percentOf(
      "[  0%] Building C object ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o",
    ),
    0,
  );
  assert.equal(percentOf("[100%] Built target llama-server"), 100);
  for (
    const line of [
      "/src/src/llama-vocab.cpp:1790:14: warning: variable 'cpt' set but not used [-Wunused-but-set-variable]",
      " 1790 |         auto cpt = unicode_cpt_from_utf8(text, pos);",
      "  112 |     if (ggml_nelements(dst) == nb00 * ne00) {",
      "gmake[2]: *** [src/CMakeFiles/llama.dir/build.make:76: src/CMakeFiles/llama.dir/llama.cpp.o] Error 1",
      "",
    ]
  ) {
    assert.equal(percentOf(line), undefined, line);
  }
});

Deno.test("a recorded build gives one piped progress line per tenth, never going back", () => {
  let percent = 0;
  let printed = 0;
  const reported: number[] = [];
  const seen: number[] = [];
  for (const line of MAKE_OUTPUT.split("\n")) {
    percent = advance(percent, line);
    seen.push(percent);
    if (entersNewTenth(printed, percent)) {
      printed = percent;
      reported.push(percent);
    }
  }
  // `[  9%]` after `[ 10%]` (two jobs) neither goes back nor prints again.
  assert.deepEqual(seen, seen.toSorted((a, b) => a - b));
  assert.deepEqual(reported, [10, 21, 31, 41, 50, 62, 71, 80, 91, 100]);
  assert.ok(reported.length <= 10);
});

Deno.test("the progress line gives make's counter and the elapsed time", () => {
  assert.equal(
    progressLine(42, 130_400),
    "compiling llama-server: 42% (2m10s)",
  );
  assert.equal(progressLine(3, 7_900), "compiling llama-server: 3% (7s)");
  assert.equal(formatElapsed(0), "0s");
  assert.equal(formatElapsed(59_999), "59s");
  assert.equal(formatElapsed(60_000), "1m00s");
  assert.equal(formatElapsed(365_000), "6m05s");
});

Deno.test("entersNewTenth starts at the first tenth and skips what a jump passed over", () => {
  assert.equal(entersNewTenth(0, 0), false);
  assert.equal(entersNewTenth(0, 9), false);
  assert.equal(entersNewTenth(0, 10), true);
  assert.equal(entersNewTenth(10, 19), false);
  assert.equal(entersNewTenth(19, 43), true);
  assert.equal(entersNewTenth(43, 100), true);
  assert.equal(entersNewTenth(100, 100), false);
});

Deno.test("the tail is the log's last 40 lines, a final newline adding none", () => {
  const log = Array.from({ length: 100 }, (_, i) => `line ${i + 1}`).join(
    "\n",
  );
  const tail = lastLines(`${log}\n`);
  assert.equal(TAIL_LINES, 40);
  assert.equal(tail.length, 40);
  assert.equal(tail[0], "line 61");
  assert.equal(tail.at(-1), "line 100");
  assert.deepEqual(lastLines("a\nb\n"), ["a", "b"]);
  assert.deepEqual(lastLines(""), []);
});

// Each cause in the tool's own words (cmake 3.25's, gcc 12's, dash's, GNU make's).
const CAUSES: ReadonlyArray<readonly [string, string[]]> = [
  ["g++", [
    "CMake Error at CMakeLists.txt:2 (project):",
    "  No CMAKE_CXX_COMPILER could be found.",
    "",
    "  Tell CMake where to find the compiler by setting either the environment",
    '  variable "CXX" or the CMake cache entry CMAKE_CXX_COMPILER to the full path',
    "-- Configuring incomplete, errors occurred!",
  ]],
  ["g++", ["  No CMAKE_C_COMPILER could be found."]],
  ["g++", [
    "g++: fatal error: cannot execute 'cc1plus': execvp: No such file or directory",
    "compilation terminated.",
  ]],
  ["g++", ["make[2]: c++: No such file or directory"]],
  // Without make cmake says the compilers are not set either: make is the cause.
  ["make", [
    'CMake Error: CMake was unable to find a build program corresponding to "Unix Makefiles".  CMAKE_MAKE_PROGRAM is not set.  You probably need to select a different build tool.',
    "CMake Error: CMAKE_C_COMPILER not set, after EnableLanguage",
    "CMake Error: CMAKE_CXX_COMPILER not set, after EnableLanguage",
  ]],
  ["make", ["/bin/sh: 1: make: not found"]],
  ["git", ["/bin/sh: 1: git: not found"]],
  ["cmake", ["bash: cmake: command not found"]],
];

for (const [tool, lines] of CAUSES) {
  Deno.test(`a missing ${tool} is found in '${lines.find(Boolean)?.trim()}'`, () => {
    assert.equal(missingTool(lines), tool);
  });
}

Deno.test("a failure of another cause names no tool, a missing source file included", () => {
  assert.equal(
    missingTool([
      "/src/ggml/src/ggml-cpu/ops.cpp:3:10: fatal error: ops.h: No such file or directory",
      "/src/ggml/src/ggml-cpu/vec.cc: No such file or directory",
      "compilation terminated.",
      "gmake[2]: *** [ggml/src/CMakeFiles/ggml-cpu.dir/build.make:90: ggml/src/CMakeFiles/ggml-cpu.dir/ggml-cpu/ops.cpp.o] Error 1",
      "c++: fatal error: Killed signal terminated program cc1plus",
    ]),
    undefined,
  );
  assert.equal(missingTool(MAKE_OUTPUT.split("\n")), undefined);
});

Deno.test("a failure summary gives the tail, the failed step, the package to install and the log", () => {
  const noise = Array.from({ length: 60 }, (_, i) => `-- noise ${i}`);
  const log = [
    ...noise,
    "CMake Error at CMakeLists.txt:2 (project):",
    "  No CMAKE_CXX_COMPILER could be found.",
    "-- Configuring incomplete, errors occurred!",
    "",
  ].join("\n");
  const summary = summariseFailure({
    command: "cmake -S . -B build",
    code: 1,
    logPath: "/cache/llama.cpp-3.22.1/build.log",
    log,
  });
  assert.equal(summary.tail.length, 40);
  assert.equal(
    summary.tail.at(-1),
    "-- Configuring incomplete, errors occurred!",
  );
  assert.equal(summary.tool, "g++");
  assert.equal(
    summary.message,
    "Cannot build llama-server: 'cmake -S . -B build' exited with 1: g++ is missing (Debian: apt-get install g++); the whole log is /cache/llama.cpp-3.22.1/build.log",
  );
});

Deno.test("a failure summary without a missing tool names the step and the log only", () => {
  const summary = summariseFailure({
    command: "cmake --build build --target llama-server -j 2",
    code: 2,
    logPath: "/cache/build.log",
    log: `${MAKE_OUTPUT}gmake: *** [Makefile:146: all] Error 2\n`,
  });
  assert.equal(summary.tool, undefined);
  assert.equal(summary.tail.at(-1), "gmake: *** [Makefile:146: all] Error 2");
  assert.equal(
    summary.message,
    "Cannot build llama-server: 'cmake --build build --target llama-server -j 2' exited with 2; the whole log is /cache/build.log",
  );
});

Deno.test("a missing compiler named above the tail is still found: the whole failed step is read", () => {
  const log = [
    "$ cd /cache/llama.cpp-3.22.1 && git clone -q package/llama/gitRelease.bundle src",
    // An earlier step that went on: not the cause of this failure.
    "/bin/sh: 1: make: not found",
    "$ cd /cache/llama.cpp-3.22.1/src && cmake -S . -B build",
    CONFIGURE_WITHOUT_C_COMPILER,
  ].join("\n");
  const summary = summariseFailure({
    command: "cmake -S . -B build",
    code: 1,
    logPath: "/cache/build.log",
    log,
  });
  assert.ok(
    !summary.tail.some((line) => line.includes("No CMAKE_C_COMPILER")),
    "the cause is above the last 40 lines",
  );
  assert.equal(summary.tool, "g++");
  assert.deepEqual(
    lastStep(["a", "$ cd /x && one", "b", "$ cd /y && two", "c"]),
    [
      "$ cd /y && two",
      "c",
    ],
  );
  assert.deepEqual(lastStep(["a", "b"]), ["a", "b"]);
  assert.equal(stepHeader("/y", "two"), "$ cd /y && two");
});
