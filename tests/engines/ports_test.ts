/**
 * The port-in-use error, with a real listener held by another process: it
 * names the holder when `/proc` tells (directly, or through `sh` under
 * narrowed permissions), omits it when nothing can be read, and always says
 * how to move (`--port`).
 */
import assert from "node:assert/strict";
import { ConfigError } from "../../src/common.ts";
import {
  checkPortFree,
  listeningInodes,
  portHolders,
} from "../../src/engines/ports.ts";
import {
  fakeBin,
  freePorts,
  Launcher,
  listDir,
  makeRoot,
  pathWith,
  siteArgs,
  STAND_IN_CATALOGUE,
} from "../support/helpers.ts";

/** A child process listening on 127.0.0.1:port until disposed. */
async function holder(
  port: number,
): Promise<Deno.ChildProcess & AsyncDisposable> {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "eval",
      `Deno.listen({ hostname: "127.0.0.1", port: ${port} }); console.log("ready"); setInterval(() => {}, 60_000);`,
    ],
    stdin: "null",
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const { value } = await reader.read();
  assert.equal(value?.trim(), "ready");
  return Object.assign(child, {
    async [Symbol.asyncDispose]() {
      child.kill("SIGKILL");
      await child.status;
      await reader.cancel();
    },
  });
}

const MOVE_API = "choose another with --port";

Deno.test("a port held by another process: the error names its pid and name, and how to move", async () => {
  const port = freePorts(0);
  await using child = await holder(port);
  assert.throws(
    () => checkPortFree("127.0.0.1", port, "the management API"),
    (error) => {
      assert.ok(error instanceof ConfigError);
      assert.equal(
        error.message,
        `Cannot use port ${port} on 127.0.0.1 for the management API: already in use by pid ${child.pid} (deno) (expected a free port: stop that process, or ${MOVE_API})`,
      );
      return true;
    },
  );
});

Deno.test("an engine's port held by another process: the error says to move the block with --port", async () => {
  const port = freePorts(0);
  await using child = await holder(port);
  assert.throws(
    () => checkPortFree("127.0.0.1", port, "engine beta"),
    {
      name: "ConfigError",
      message:
        `Cannot use port ${port} on 127.0.0.1 for engine beta: already in use by pid ${child.pid} (deno) (expected a free port: stop that process, or move the block with --port (engines listen on --port+1, --port+2, ...))`,
    },
  );
});

Deno.test("a free port passes, and no process is said to hold it", () => {
  const port = freePorts(0);
  checkPortFree("127.0.0.1", port, "the management API");
  assert.deepEqual(portHolders(port), []);
});

Deno.test("listening inodes are read from /proc/net/tcp lines in LISTEN state only, by port", () => {
  const table = [
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
    "   0: 0100007F:1388 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0",
    "   1: 0100007F:1388 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1",
    "   2: 00000000:1389 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 333 1 0 100 0 0 10 0",
    "",
  ].join("\n");
  assert.deepEqual(listeningInodes(table, 5000), ["111"]);
  assert.deepEqual(listeningInodes(table, 5001), ["333"]);
  assert.deepEqual(listeningInodes(table, 5002), []);
});

for (
  const [permissions, named] of [
    // deno task start's programs: /proc is read through sh.
    [["--allow-run=vllm,kill,sh,prlimit"], true],
    // No sh: /proc cannot be read, the holder is left out.
    [["--allow-run=vllm,kill"], false],
  ] as const
) {
  Deno.test(`the launcher under ${permissions[0]}: the port-in-use line ${named ? "names the holder (read through sh)" : "omits the holder"} and says how to move`, async () => {
    const root = await makeRoot();
    const bin = await fakeBin(["vllm"]);
    try {
      await Deno.copyFile(STAND_IN_CATALOGUE, `${root}/catalogue.yaml`);
      const port = freePorts(1);
      await using child = await holder(port);
      await using launcher = new Launcher(
        ["alpha", ...siteArgs(port, root, `${root}/catalogue.yaml`)],
        { PATH: pathWith(bin), NUCLEUS_MODE: "dev" },
        [
          "--allow-net",
          "--allow-env",
          `--allow-read=${root}`,
          `--allow-write=${root}`,
          ...permissions,
        ],
      );
      assert.equal((await launcher.exited()).code, 1);
      const errors = launcher.lines.filter((l) => l.includes("error"));
      assert.deepEqual(errors, [
        `[serve] error: Cannot use port ${port} on 127.0.0.1 for the management API: already in use${
          named ? ` by pid ${child.pid} (deno)` : ""
        } (expected a free port: ${
          named ? "stop that process, or " : ""
        }${MOVE_API})`,
      ], launcher.stderr);
      assert.deepEqual(listDir(`${root}/data`), [], "no engine started");
    } finally {
      await Deno.remove(root, { recursive: true });
      await Deno.remove(bin, { recursive: true });
    }
  });
}
