/**
 * The llama-server build task: reuse of a finished build, the missing-tool
 * error, `--print-path`, and what a build asks of cmake (with a stand-in
 * cmake, in a temporary cache: the real cache is never rebuilt here).
 */
import assert from "node:assert/strict";
import {
  isLlamaServerBuilt,
  llamaServerPath,
  NODE_LLAMA_CPP_VERSION,
  UI_NOTE,
} from "../../tools/llama_server.ts";

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

Deno.test("a build skips the web UI download and says first that cmake's UI warning is expected", async () => {
  const cache = await Deno.makeTempDir();
  const bin = await Deno.makeTempDir();
  try {
    // A source tree already cloned, so nothing is fetched.
    const src = `${cache}/llama.cpp-${NODE_LLAMA_CPP_VERSION}/src`;
    await Deno.mkdir(src, { recursive: true });
    await Deno.writeTextFile(`${src}/CMakeLists.txt`, "");
    for (const tool of ["npm", "tar", "git", "g++", "make"]) {
      await Deno.writeTextFile(`${bin}/${tool}`, "#!/bin/sh\nexit 1\n", {
        mode: 0o755,
      });
    }
    // The stand-in cmake records its arguments; the build step warns as llama.cpp's does.
    await Deno.writeTextFile(
      `${bin}/cmake`,
      `#!/bin/sh
printf '%s\\n' "$*" >> '${bin}/cmake.args'
case "$1" in --build) echo 'CMake Warning: UI: no assets available - building without an embedded UI.' >&2 ;; esac
`,
      { mode: 0o755 },
    );
    const result = await runTool({ PATH: bin, MYMODEL_CACHE: cache });
    assert.equal(result.code, 0, result.stderr);
    const [configure, build] = (await Deno.readTextFile(`${bin}/cmake.args`))
      .trim().split("\n");
    assert.match(configure!, /^-S \. -B build .*-DLLAMA_USE_PREBUILT_UI=OFF/);
    assert.match(build!, /^--build build --target llama-server/);
    const lines = result.stderr.split("\n");
    const note = lines.indexOf(`[engine:llama] ${UI_NOTE}`);
    const warning = lines.findIndex((l) => l.startsWith("CMake Warning"));
    assert.ok(note >= 0 && note < warning, result.stderr);
  } finally {
    await Deno.remove(cache, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});
