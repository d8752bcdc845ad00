/**
 * The llama-server build task: reuse of a finished build, the missing-tool
 * error, `--print-path`, what a build asks of cmake, what it prints and what a
 * failed one says (with a stand-in cmake and compiler, in a temporary cache:
 * the real cache is never rebuilt here).
 */
import assert from "node:assert/strict";
import { lastLines } from "../../tools/build_progress.ts";
import {
  isLlamaServerBuilt,
  llamaServerPath,
  NODE_LLAMA_CPP_VERSION,
  UI_NOTE,
} from "../../tools/llama_server.ts";
import { MAKE_OUTPUT } from "../fixtures/llama_build_output.ts";

const TOOL = new URL("../../tools/llama_server.ts", import.meta.url).pathname;

async function runTool(env: Record<string, string>, args: string[] = []) {
  const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--quiet", TOOL, ...args],
    env,
    stdin: "null",
  }).output();
  const text = (b: Uint8Array) => new TextDecoder().decode(b).trim();
  return { code, stdout: text(stdout), stderr: text(stderr) };
}

/** A directory of links to the named tools that exist on this machine. */
async function toolDir(names: string[]): Promise<string> {
  const dir = await Deno.makeTempDir();
  for (const name of names) {
    const { stdout } = await new Deno.Command("sh", {
      args: ["-c", `command -v ${name}`],
    }).output();
    const path = new TextDecoder().decode(stdout).trim();
    if (path) await Deno.symlink(path, `${dir}/${name}`);
  }
  return dir;
}

for (const missing of ["cmake", "git", "g++"]) {
  Deno.test(`a missing ${missing} is named, with how to install it, before anything is fetched`, async () => {
    const cache = await Deno.makeTempDir();
    const tools = ["npm", "tar", "git", "cmake", "g++", "make"].filter((t) =>
      t !== missing
    );
    const bin = await toolDir(tools);
    const result = await runTool({ PATH: bin, MYMODEL_CACHE: cache });
    assert.equal(result.code, 1);
    assert.equal(
      result.stderr.split("\n").at(-1),
      `Cannot build llama-server: '${missing}' is not on PATH (apt-get install ${missing})`,
    );
    assert.deepEqual(
      [...Deno.readDirSync(cache)],
      [],
      "nothing fetched or created",
    );
    await Deno.remove(cache, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  });
}

Deno.test("a finished build is reused at once, whatever PATH holds", async () => {
  assert.ok(isLlamaServerBuilt(), "run deno task engine:llama first");
  const result = await runTool({ PATH: "/nonexistent" });
  assert.equal(result.code, 0, result.stderr);
  assert.equal(result.stdout, llamaServerPath());
  assert.match(result.stderr, /using the cached build/);
});

Deno.test("--print-path prints the cached binary's path and builds nothing", async () => {
  assert.ok(isLlamaServerBuilt(), "run deno task engine:llama first");
  const result = await runTool({ PATH: "/nonexistent" }, ["--print-path"]);
  assert.equal(result.code, 0, result.stderr);
  assert.equal(result.stdout, llamaServerPath());
  assert.equal(result.stderr, "");
});

Deno.test("--print-path before any build says so in one line and exits 1, creating nothing", async () => {
  const cache = await Deno.makeTempDir();
  try {
    const result = await runTool({ MYMODEL_CACHE: cache }, ["--print-path"]);
    assert.equal(result.code, 1);
    assert.equal(result.stdout, "");
    assert.equal(
      result.stderr,
      `Cannot print the path of llama-server: it is not built yet at ${cache}/llama.cpp-${NODE_LLAMA_CPP_VERSION}/src/build/bin/llama-server (expected a finished build: run deno task engine:llama)`,
    );
    assert.deepEqual([...Deno.readDirSync(cache)], []);
  } finally {
    await Deno.remove(cache, { recursive: true });
  }
});

/**
 * A temporary cache holding an already cloned source tree (so nothing is
 * fetched) and a PATH of stand-ins: a `cmake` running `configure` or `build`
 * (shell text; make's recorded output is in `$BIN/make-output.txt`), and the
 * other tools, failing. Removed on dispose.
 */
async function standInBuild(
  scripts: {
    configure?: string;
    build?: string;
    extra?: Record<string, string>;
  },
): Promise<
  AsyncDisposable & { cache: string; bin: string; log: string; binary: string }
> {
  const cache = await Deno.makeTempDir();
  const bin = await Deno.makeTempDir();
  const root = `${cache}/llama.cpp-${NODE_LLAMA_CPP_VERSION}`;
  await Deno.mkdir(`${root}/src`, { recursive: true });
  await Deno.writeTextFile(`${root}/src/CMakeLists.txt`, "");
  await Deno.writeTextFile(`${bin}/make-output.txt`, MAKE_OUTPUT);
  const tools: Record<string, string> = {
    npm: "exit 1",
    tar: "exit 1",
    git: "exit 1",
    "g++": "exit 1",
    make: "exit 1",
    ...scripts.extra,
    cmake: `BIN='${bin}'
printf '%s\\n' "$*" >> "$BIN/cmake.args"
case "$1" in
--build) ${scripts.build ?? ":"} ;;
*) ${scripts.configure ?? ":"} ;;
esac`,
  };
  for (const [name, body] of Object.entries(tools)) {
    await Deno.writeTextFile(`${bin}/${name}`, `#!/bin/sh\n${body}\n`, {
      mode: 0o755,
    });
  }
  return {
    cache,
    bin,
    log: `${root}/build.log`,
    binary: `${root}/src/build/bin/llama-server`,
    async [Symbol.asyncDispose]() {
      await Deno.remove(cache, { recursive: true });
      await Deno.remove(bin, { recursive: true });
    },
  };
}

// Shell text: print make's recorded output (sh builtins only: PATH is the stand-ins).
const PRINT_MAKE_OUTPUT =
  'while IFS= read -r line; do printf "%s\\n" "$line"; done < "$BIN/make-output.txt"';
const UI_WARNING =
  "echo 'CMake Warning: UI: no assets available - building without an embedded UI.' >&2";

Deno.test("a build asks cmake for no web UI, configures, then compiles llama-server alone", async () => {
  await using build = await standInBuild({});
  const result = await runTool({ PATH: build.bin, MYMODEL_CACHE: build.cache });
  assert.equal(result.code, 0, result.stderr);
  const [configure, compile] =
    (await Deno.readTextFile(`${build.bin}/cmake.args`))
      .trim().split("\n");
  assert.match(configure!, /^-S \. -B build .*-DLLAMA_USE_PREBUILT_UI=OFF/);
  assert.match(compile!, /^--build build --target llama-server/);
});

Deno.test("a first build prints a few lines: the log, a line per tenth, the binary; the log has everything", async () => {
  await using build = await standInBuild({
    configure: UI_WARNING,
    build: PRINT_MAKE_OUTPUT,
  });
  const result = await runTool({
    PATH: build.bin,
    MYMODEL_CACHE: build.cache,
    MYMODEL_BUILD_VERBOSE: "",
  });
  assert.equal(result.code, 0, result.stderr);
  assert.equal(result.stdout, build.binary);
  const lines = result.stderr.split("\n");
  assert.match(
    lines[0]!,
    /^\[engine:llama\] building llama-server; its whole output goes to (\S+) \(--verbose or MYMODEL_BUILD_VERBOSE=1 shows it here\)$/,
  );
  assert.ok(lines[0]!.includes(build.log), lines[0]);
  assert.ok(
    lines.every((line) => line.startsWith("[engine:llama] ")),
    result.stderr,
  );
  const percents = lines.flatMap((line) =>
    /compiling llama-server: (\d+)% \(\d+s\)$/.exec(line)?.[1] ?? []
  ).map(Number);
  assert.deepEqual(percents, [10, 21, 31, 41, 50, 62, 71, 80, 91, 100]);
  assert.match(
    lines.at(-1)!,
    new RegExp(`^\\[engine:llama\\] built ${build.binary} in \\d+s$`),
  );
  assert.ok(lines.length <= 15, `${lines.length} lines:\n${result.stderr}`);
  const log = await Deno.readTextFile(build.log);
  for (const line of MAKE_OUTPUT.trim().split("\n")) {
    assert.ok(log.includes(`${line}\n`), line);
  }
  assert.match(log, /^CMake Warning: UI: no assets available/m);
  assert.match(log, /^\$ cd \S+ && cmake --build build --target llama-server/m);
});

Deno.test("a failed compile exits 1 with the log's last 40 lines, its path and the missing compiler's Debian package", async () => {
  await using build = await standInBuild({
    // make's first files, then a compiler without its C++ front end.
    build: `${
      PRINT_MAKE_OUTPUT.replace(
        "done <",
        'case "$line" in *llama.cpp.o) break ;; esac; done <',
      )
    }
g++ -c llama.cpp -o llama.cpp.o || {
  echo 'gmake[2]: *** [src/CMakeFiles/llama.dir/build.make:76: src/CMakeFiles/llama.dir/llama.cpp.o] Error 1' >&2
  echo 'gmake[1]: *** [CMakeFiles/Makefile2:1043: src/CMakeFiles/llama.dir/all] Error 2' >&2
  echo 'gmake: *** [Makefile:146: all] Error 2' >&2
  exit 2
}`,
    extra: {
      "g++":
        `echo "g++: fatal error: cannot execute 'cc1plus': execvp: No such file or directory" >&2
echo 'compilation terminated.' >&2
exit 1`,
    },
  });
  const result = await runTool({
    PATH: build.bin,
    MYMODEL_CACHE: build.cache,
    MYMODEL_BUILD_VERBOSE: "",
  });
  assert.equal(result.code, 1, result.stderr);
  assert.equal(result.stdout, "");
  const lines = result.stderr.split("\n");
  const header = lines.indexOf(
    `[engine:llama] the last 40 lines of ${build.log}:`,
  );
  assert.ok(header > 0, result.stderr);
  const log = await Deno.readTextFile(build.log);
  assert.deepEqual(lines.slice(header + 1, -1), lastLines(log, 40));
  assert.ok(log.includes("cannot execute 'cc1plus'"), log);
  assert.equal(
    lines.at(-1),
    `Cannot build llama-server: 'cmake --build build --target llama-server -j ${
      navigator.hardwareConcurrency || 2
    }' exited with 2: g++ is missing (Debian: apt-get install g++); the whole log is ${build.log}`,
  );
  assert.ok(!isLlamaServerBuiltIn(build.cache), "no BUILT mark");
});

Deno.test("a failed configure without a C++ compiler says so, naming g++", async () => {
  await using build = await standInBuild({
    configure: `echo '-- The CXX compiler identification is unknown'
echo 'CMake Error at CMakeLists.txt:2 (project):' >&2
echo '  No CMAKE_CXX_COMPILER could be found.' >&2
echo '-- Configuring incomplete, errors occurred!'
exit 1`,
  });
  const result = await runTool({
    PATH: build.bin,
    MYMODEL_CACHE: build.cache,
    MYMODEL_BUILD_VERBOSE: "",
  });
  assert.equal(result.code, 1, result.stderr);
  assert.match(
    result.stderr.split("\n").at(-1)!,
    new RegExp(
      `^Cannot build llama-server: 'cmake -S \\. -B build .*' exited with 1: g\\+\\+ is missing \\(Debian: apt-get install g\\+\\+\\); the whole log is ${build.log}$`,
    ),
  );
  assert.ok(
    result.stderr.split("\n").includes(
      "  No CMAKE_CXX_COMPILER could be found.",
    ),
    result.stderr,
  );
  assert.doesNotMatch(result.stderr, /compiling/);
});

for (
  const [how, args, env] of [
    ["--verbose", ["--verbose"], {}],
    ["MYMODEL_BUILD_VERBOSE=1", [], { MYMODEL_BUILD_VERBOSE: "1" }],
  ] as const
) {
  Deno.test(`${how} streams the whole build, saying first that cmake's UI warning is expected`, async () => {
    await using build = await standInBuild({
      configure: UI_WARNING,
      build: PRINT_MAKE_OUTPUT,
    });
    const result = await runTool(
      { PATH: build.bin, MYMODEL_CACHE: build.cache, ...env },
      [...args],
    );
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout, build.binary);
    const lines = result.stderr.split("\n");
    const note = lines.indexOf(`[engine:llama] ${UI_NOTE}`);
    const warning = lines.findIndex((l) => l.startsWith("CMake Warning"));
    assert.ok(note >= 0 && note < warning, result.stderr);
    for (const line of MAKE_OUTPUT.trim().split("\n")) {
      assert.ok(lines.includes(line), line);
    }
    assert.doesNotMatch(result.stderr, /compiling llama-server: \d+%/);
    assert.ok((await Deno.readTextFile(build.log)).includes(MAKE_OUTPUT));
  });
}

function isLlamaServerBuiltIn(cache: string): boolean {
  try {
    Deno.statSync(`${cache}/llama.cpp-${NODE_LLAMA_CPP_VERSION}/BUILT`);
    return true;
  } catch {
    return false;
  }
}
