/**
 * The llama-server build task: reuse of a finished build, the missing-tool
 * error, `--print-path`, what a build asks of cmake, what it prints, what a
 * failed one says and how an interrupted one resumes (with stand-in tools, in
 * a temporary cache: the real cache is never rebuilt here).
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
    /** No source tree yet: the build fetches and clones it. */
    fetch?: boolean;
  },
): Promise<
  AsyncDisposable & {
    cache: string;
    bin: string;
    root: string;
    log: string;
    binary: string;
  }
> {
  const cache = await Deno.makeTempDir();
  const bin = await Deno.makeTempDir();
  const root = `${cache}/llama.cpp-${NODE_LLAMA_CPP_VERSION}`;
  await Deno.mkdir(`${root}/src`, { recursive: true });
  if (scripts.fetch) await Deno.remove(`${root}/src`);
  else {
    await Deno.writeTextFile(`${root}/src/CMakeLists.txt`, "");
    // The mark of a finished clone.
    await Deno.writeTextFile(`${root}/SOURCE`, "test\n");
  }
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
    root,
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

// Stand-ins for a build from nothing, each writing its step to $BIN/steps and,
// when $BIN/interrupt-<step> is there, stopping its build half-way as Ctrl-C
// would (SIGINT to the tool, the stand-in's parent). sh builtins and absolute
// paths only: PATH is the stand-ins.
function interruptible(step: string, half: string, whole: string): string {
  return `BIN="$(cd "$(/usr/bin/dirname "$0")" && pwd)"
echo '${step}' >> "$BIN/steps"
${half}
if [ -f "$BIN/interrupt-${step}" ]; then
  /bin/rm "$BIN/interrupt-${step}"
  kill -INT $PPID
  exit 130
fi
${whole}`;
}

const TARBALL = `node-llama-cpp-${NODE_LLAMA_CPP_VERSION}.tgz`;
const BUNDLE = "package/llama/gitRelease.bundle";

const FETCHING = {
  // npm pack writes the tarball where it runs, as it downloads.
  npm: interruptible(
    "npm pack",
    `echo partial > ${TARBALL}`,
    `echo whole >> ${TARBALL}; echo ${TARBALL}`,
  ),
  // A truncated tarball fails as gzip does.
  tar: interruptible(
    "tar",
    `{ read -r first; read -r second; } < "$2"
if [ "$second" != whole ]; then echo 'gzip: stdin: unexpected end of file' >&2; exit 2; fi
/bin/mkdir -p package/llama`,
    `echo bundle > ${BUNDLE}`,
  ),
  // git writes the work tree file by file; llama.cpp's CMakeLists.txt comes first.
  git: interruptible(
    "git clone",
    `for dest; do :; done
/bin/mkdir -p "$dest/ggml"
echo 'add_subdirectory(ggml)' > "$dest/CMakeLists.txt"`,
    `echo '' > "$dest/ggml/CMakeLists.txt"`,
  ),
};

// cmake's own error for a source tree without ggml/ (llama.cpp's CMakeLists.txt:223).
const CONFIGURE_NEEDS_GGML = `if [ ! -f ggml/CMakeLists.txt ]; then
  echo 'CMake Error at CMakeLists.txt:223 (add_subdirectory):' >&2
  echo '  add_subdirectory given source "ggml" which is not an existing directory.' >&2
  exit 1
fi`;
const COMPILE = `/bin/mkdir -p build/bin; echo binary > build/bin/llama-server`;

async function steps(build: { bin: string }): Promise<string[]> {
  const text = await Deno.readTextFile(`${build.bin}/steps`);
  await Deno.remove(`${build.bin}/steps`);
  return text.trim().split("\n");
}

Deno.test("Ctrl-C during the clone: the next build clones again out of the fetched package, configures and compiles", async () => {
  await using build = await standInBuild({
    fetch: true,
    extra: FETCHING,
    configure: `echo configure >> "$BIN/steps"\n${CONFIGURE_NEEDS_GGML}`,
    build: `echo compile >> "$BIN/steps"\n${COMPILE}`,
  });
  const env = { PATH: build.bin, MYMODEL_CACHE: build.cache };
  await Deno.writeTextFile(`${build.bin}/interrupt-git clone`, "");
  const stopped = await runTool(env);
  assert.notEqual(stopped.code, 0, stopped.stderr);
  assert.deepEqual(await steps(build), ["npm pack", "tar", "git clone"]);
  assert.ok(
    Deno.statSync(`${build.root}/src/CMakeLists.txt`).isFile,
    "the partial tree an interrupted clone leaves",
  );

  const resumed = await runTool(env);
  assert.equal(resumed.code, 0, resumed.stderr);
  assert.equal(resumed.stdout, build.binary);
  // The whole tarball is kept; the partial tree is not trusted.
  assert.deepEqual(await steps(build), [
    "tar",
    "git clone",
    "configure",
    "compile",
  ]);
  assert.ok(isLlamaServerBuiltIn(build.cache));
  assert.deepEqual(
    [...Deno.readDirSync(build.root)].map((entry) => entry.name).sort(),
    ["BUILT", "SOURCE", "build.log", "src"],
    "the tarball and the bundle are gone",
  );
  const again = await runTool(env);
  assert.match(again.stderr, /using the cached build/);
  await assert.rejects(steps(build), Deno.errors.NotFound, "no step ran");
});

Deno.test("Ctrl-C during npm's download: the next build downloads again instead of untarring half a tarball", async () => {
  await using build = await standInBuild({
    fetch: true,
    extra: FETCHING,
    configure: CONFIGURE_NEEDS_GGML,
    build: COMPILE,
  });
  const env = { PATH: build.bin, MYMODEL_CACHE: build.cache };
  await Deno.writeTextFile(`${build.bin}/interrupt-npm pack`, "");
  const stopped = await runTool(env);
  assert.notEqual(stopped.code, 0, stopped.stderr);
  assert.deepEqual(await steps(build), ["npm pack"]);

  const resumed = await runTool(env);
  assert.equal(resumed.code, 0, resumed.stderr);
  assert.deepEqual(await steps(build), ["npm pack", "tar", "git clone"]);
  assert.ok(isLlamaServerBuiltIn(build.cache));
});

Deno.test("a build killed during the compile leaves nothing that counts as built; the next one configures and compiles, fetching nothing", async () => {
  await using build = await standInBuild({
    configure: `echo configure >> "$BIN/steps"`,
    build: `echo compile >> "$BIN/steps"
/bin/mkdir -p build/bin
echo half > build/bin/llama-server
if [ -f "$BIN/kill" ]; then /bin/rm "$BIN/kill"; kill -KILL $PPID; exit 137; fi
echo binary > build/bin/llama-server`,
  });
  const env = { PATH: build.bin, MYMODEL_CACHE: build.cache };
  // An earlier build's mark, its binary since removed (a cleaned build folder).
  await Deno.writeTextFile(`${build.root}/BUILT`, "2026-11-30T10:00:00Z\n");
  await Deno.writeTextFile(`${build.bin}/kill`, "");
  const killed = await runTool(env);
  assert.notEqual(killed.code, 0, killed.stderr);
  assert.equal(await Deno.readTextFile(build.binary), "half\n");
  const path = await runTool(env, ["--print-path"]);
  assert.equal(path.code, 1, "a half-written binary is not a build");
  assert.match(path.stderr, /it is not built yet/);

  const resumed = await runTool(env);
  assert.equal(resumed.code, 0, resumed.stderr);
  assert.deepEqual(await steps(build), [
    "configure",
    "compile",
    "configure",
    "compile",
  ]);
  assert.equal(await Deno.readTextFile(build.binary), "binary\n");
  assert.ok(isLlamaServerBuiltIn(build.cache));
});
