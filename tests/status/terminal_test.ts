/**
 * The status view on a terminal (a pseudo-terminal from util-linux `script`,
 * 100 and 80 columns): one line per engine, the free text cut with `…`, whole
 * columns dropped, the model names whole; `--wide` and a pipe keep whole rows.
 */
import assert from "node:assert/strict";

const STATUS = new URL("../../src/status.ts", import.meta.url).pathname;
const hasScript = (() => {
  try {
    return Deno.statSync("/usr/bin/script").isFile;
  } catch {
    return false;
  }
})();

const DETAIL = {
  active: {
    "qwen3-coder-30b-a3b": {
      verb: "chat",
      state: "backoff",
      healthy: false,
      pid: null,
      restarts: 2,
      gpus: [],
      url: "https://gpu-node-17.cluster.example.internal:5003/v1",
      last_exit: {
        code: 1,
        cause: "gpu-out-of-memory",
        message:
          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
      },
    },
    "llama-3": {
      verb: "chat",
      state: "ready",
      healthy: true,
      pid: 81234,
      restarts: 0,
      gpus: ["0"],
      url: "http://localhost:5001/v1",
      traffic: { running: 3, waiting: 0, tokens_per_s: 41.7, at: "x" },
    },
  },
  catalogue: [],
};

/** A stand-in launcher answering `/health` and `/models?detail=1`. */
function stub(): Deno.HttpServer<Deno.NetAddr> {
  return Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (req) =>
      new URL(req.url).pathname === "/models"
        ? Response.json(DETAIL)
        : new Response("ok"),
  );
}

async function run(command: string, args: string[]): Promise<string[]> {
  const out = await new Deno.Command(command, {
    args,
    env: { NO_COLOR: "1" },
    stdin: "null",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  assert.equal(out.code, 0, text + new TextDecoder().decode(out.stderr));
  return text.replaceAll("\r", "").trimEnd().split("\n");
}

function onTerminal(args: string[], columns = 100): Promise<string[]> {
  const status = [Deno.execPath(), "run", "-A", "--quiet", STATUS, ...args]
    .join(" ");
  return run("script", [
    "-qec",
    `stty cols ${columns} rows 40; ${status}`,
    "/dev/null",
  ]);
}

Deno.test({
  name:
    "on a 100-column terminal each engine stays on one line; --wide and a pipe keep whole rows",
  ignore: !hasScript,
  async fn() {
    await using server = stub();
    const url = ["--url", `http://127.0.0.1:${server.addr.port}`];
    const cut = await onTerminal(url);
    assert.equal(cut.length, 3, cut.join("\n"));
    for (const line of cut) assert.ok(line.length <= 100, line);
    assert.match(cut[0]!, /REQ +TOK\/S/);
    assert.match(cut[1]!, /…/);
    // PID went first after the URL: GPUS, MEM (no footprint: -), RESTARTS.
    assert.match(cut[2]!, /^llama-3 +chat +ready +yes +3 +41\.7 +0 +- +0 /);

    const wide = await onTerminal([...url, "--wide"]);
    assert.ok(wide[1]!.length > 130, wide[1]);
    assert.ok(!wide.join("\n").includes("…"));
    assert.ok(wide[1]!.includes("Tried to allocate 2.00 GiB"));

    const piped = await run(Deno.execPath(), [
      "run",
      "-A",
      "--quiet",
      STATUS,
      ...url,
    ]);
    assert.deepEqual(piped, wide);
  },
});

Deno.test({
  name:
    "on an 80-column terminal (a fresh ssh session) the model names stay whole: the URL, PID, GPUS, MEM and VERB columns go, as the help says",
  ignore: !hasScript,
  async fn() {
    await using server = stub();
    const url = ["--url", `http://127.0.0.1:${server.addr.port}`];
    const lines = await onTerminal(url, 80);
    assert.equal(lines.length, 3, lines.join("\n"));
    for (const line of lines) assert.ok(line.length <= 80, line);
    assert.match(lines[1]!, /^qwen3-coder-30b-a3b +backoff +no /);
    assert.match(lines[2]!, /^llama-3 +ready +yes +3 +41\.7 +0 +- +-$/);
    assert.equal(
      lines[0],
      "MODEL                STATE    HEALTHY  REQ  TOK/S  RESTARTS  SINCE  LAST EXIT",
    );
    const help = (await run(Deno.execPath(), [
      "run",
      "-A",
      "--quiet",
      STATUS,
      "--help",
    ])).join(" ").replace(/\s+/g, " ");
    assert.ok(
      help.includes(
        "columns are dropped, first to last: URL, PID, GPUS, MEM, VERB, RESTARTS,",
      ),
      help,
    );
  },
});
