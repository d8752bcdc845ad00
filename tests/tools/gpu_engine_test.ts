/**
 * tools/gpu_engine.py, the real GPU check's engine, where python3 is here
 * (without `--hold-mib` it imports no PyTorch): its load, crash and SIGTERM
 * behaviours, and vLLM's sleep routes as the vLLM stand-in has them.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { freePorts, pidAlive, waitFor } from "../support/helpers.ts";
import { vllmServeArgs } from "../support/vllm_stand_in.ts";

const ENGINE = fileURLToPath(
  new URL("../../tools/gpu_engine.py", import.meta.url),
);
/** Whether python3 runs here. */
function hasPython(): boolean {
  try {
    return new Deno.Command("python3", {
      args: ["--version"],
      stdout: "null",
      stderr: "null",
    }).outputSync().success;
  } catch {
    return false;
  }
}

Deno.test({
  name:
    "tools/gpu_engine.py: 503 while loading, then 200; its record; SIGTERM ignored on request; exit 3 after --crash-after-ms",
  ignore: !hasPython(),
  async fn() {
    const records = await Deno.makeTempDir({ prefix: "serve-gpuengine-" });
    const port = freePorts(1);
    const start = (extra: string[]) =>
      new Deno.Command("python3", {
        args: [
          ENGINE,
          ...vllmServeArgs(port, "m"),
          ...extra,
        ],
        env: { GPU_ENGINE_RECORD_DIR: records },
        stdin: "null",
        stdout: "null",
        stderr: "piped",
      }).spawn();
    const health = () =>
      fetch(`http://127.0.0.1:${port}/health`).then(async (r) => {
        await r.body?.cancel();
        return r.status;
      }).catch(() => 0);
    try {
      const engine = start(["--load-ms", "1500", "--ignore-sigterm"]);
      await waitFor(async () => (await health()) === 503, "503 while loading");
      await waitFor(async () => (await health()) === 200, "200 once loaded");
      const record = JSON.parse(
        await Deno.readTextFile(`${records}/${port}.json`),
      );
      assert.equal(record.pid, engine.pid);
      assert.ok(record.readyAt - record.allocatedAt >= 1500);
      engine.kill("SIGTERM");
      await new Promise((r) => setTimeout(r, 300));
      assert.ok(pidAlive(engine.pid), "SIGTERM ignored");
      engine.kill("SIGKILL");
      await engine.stderr.cancel();
      await engine.status;

      const crashing = start(["--crash-after-ms", "300"]);
      await crashing.stderr.cancel();
      const status = await crashing.status;
      assert.equal(status.code, 3);
    } finally {
      await Deno.remove(records, { recursive: true });
    }
  },
});

Deno.test({
  name:
    "tools/gpu_engine.py sleeps as vLLM does: dev routes only in dev mode, a request while asleep parks and counts in /load (not in the running gauge), the wake runs it, a bad mode answers 500",
  ignore: !hasPython(),
  async fn() {
    const port = freePorts(1);
    const origin = `http://127.0.0.1:${port}`;
    const start = (env: Record<string, string>) =>
      new Deno.Command("python3", {
        args: [
          ENGINE,
          ...vllmServeArgs(port),
          "--enable-sleep-mode",
          "--enable-server-load-tracking",
          "--token-ms",
          "20",
        ],
        env,
        stdin: "null",
        stdout: "piped",
        stderr: "null",
      }).spawn();
    const ask = async (path: string, post = false) => {
      const r = await fetch(origin + path, { method: post ? "POST" : "GET" });
      return { status: r.status, text: await r.text() };
    };
    const up = async () =>
      await waitFor(
        async () =>
          (await ask("/health").catch(() => ({ status: 0 }))).status === 200,
        "listening",
      );
    const stop = async (engine: Deno.ChildProcess) => {
      engine.kill("SIGKILL");
      const out = new TextDecoder().decode((await engine.output()).stdout);
      return out;
    };

    const plain = start({});
    await up();
    assert.equal((await ask("/sleep?level=1", true)).status, 404);
    assert.equal((await ask("/is_sleeping")).status, 404);
    await stop(plain);

    const engine = start({ VLLM_SERVER_DEV_MODE: "1" });
    try {
      await up();
      assert.deepEqual(JSON.parse((await ask("/version")).text), {
        version: "0.17.0",
      });
      assert.equal((await ask("/sleep?level=1&mode=wait", true)).status, 200);
      assert.deepEqual(JSON.parse((await ask("/is_sleeping")).text), {
        is_sleeping: true,
      });
      const parked = fetch(`${origin}/v1/chat/completions`, {
        method: "POST",
        body: JSON.stringify({ max_tokens: 3, stream: true }),
      }).then((r) => r.text());
      await waitFor(
        async () => JSON.parse((await ask("/load")).text).server_load === 1,
        "the parked request in /load",
      );
      assert.match(
        (await ask("/metrics")).text,
        /^vllm:num_requests_running\{[^}]*\} 0\.0$/m,
      );
      assert.equal((await ask("/wake_up", true)).status, 200);
      const text = await parked;
      assert.match(text, / t2/);
      assert.match(text, /data: \[DONE\]/);
      assert.equal(JSON.parse((await ask("/load")).text).server_load, 0);
      const bad = await ask("/sleep?level=1&mode=later", true);
      assert.equal(bad.status, 500);
      assert.equal(
        JSON.parse(bad.text).error.message,
        "Call to sleep method failed: Invalid pause mode: later",
      );
    } finally {
      const out = await stop(engine);
      assert.match(out, /Sleep mode freed 0\.00 GiB memory/);
      assert.match(out, /It took \S+ seconds to wake up tags/);
    }
  },
});
