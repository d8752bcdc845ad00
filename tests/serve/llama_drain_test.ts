/**
 * The drain with the real llama.cpp `llama-server` (the cached build, see
 * tests/serve/llama_e2e_test.ts) and its own `/metrics`
 * (`llamacpp:requests_processing`, `llamacpp:requests_deferred`) behind the
 * engine API key: a stop waits for the requests queued on its one slot.
 */
import assert from "node:assert/strict";
import {
  freePorts,
  Launcher,
  models,
  siteArgs,
  waitFor,
} from "../support/helpers.ts";
import { llamaRoot } from "../support/llama.ts";

const FIXTURE = new URL("../fixtures/llama.yaml", import.meta.url).pathname;
const KEY = "drain-key";

Deno.test("drain with llama-server: a stop waits for every queued stream, read from its metrics with the key", async () => {
  const { root, path } = await llamaRoot();
  const port = freePorts(1);
  await using launcher = new Launcher([
    "tiny-a",
    ...siteArgs(port, root, FIXTURE),
    "--dev_mode",
    "--grace",
    "5",
  ], {
    PATH: path,
    MY_LOCAL: "",
    NUCLEUS_HOST: "",
    NUCLEUS_PORT: "",
    LOCAL_ENGINE_API_KEY: KEY,
  });
  try {
    await launcher.ready();
    await waitFor(
      async () =>
        (await models(port, true)).active["tiny-a"]?.state === "ready",
      "tiny-a ready",
      60_000,
    );
    // One slot (`parallel: 1`): the others wait in llama-server's queue.
    const streams = Array.from(
      { length: 20 },
      () =>
        fetch(`http://127.0.0.1:${port + 1}/v1/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${KEY}` },
          body: JSON.stringify({
            prompt: "hello",
            max_tokens: 200,
            ignore_eos: true,
            stream: true,
          }),
        }).then((r) => r.text()).then((t) => t.includes("data: [DONE]"))
          .catch(() => false),
    );
    await new Promise((r) => setTimeout(r, 100));
    launcher.child.kill("SIGTERM");
    assert.equal((await launcher.exited()).code, 0);
    const whole = (await Promise.all(streams)).filter(Boolean).length;
    assert.equal(whole, 20, launcher.stderr);
    assert.match(
      launcher.stderr,
      /engine tiny-a \(pid \d+\) drained in [\d.]+ s: \d+ requests? finished, 0 cut/,
    );
  } finally {
    await launcher.stop();
    await Deno.remove(root, { recursive: true });
  }
});
