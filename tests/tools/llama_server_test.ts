/** The llama-server build task: reuse of a finished build, and the missing-tool error. */
import assert from "node:assert/strict";
import {
  isLlamaServerBuilt,
  llamaServerPath,
} from "../../tools/llama_server.ts";

const TOOL = new URL("../../tools/llama_server.ts", import.meta.url).pathname;

async function runTool(env: Record<string, string>) {
  const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--quiet", TOOL],
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
