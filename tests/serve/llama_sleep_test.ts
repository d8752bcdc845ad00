/**
 * A sleeping engine, with the real llama-server (`deno task engine:llama`)
 * over the tiny model, its card setting `sleep-idle-seconds: 2` and an API
 * key: the launcher shows it `sleeping` while healthy; its own rounds (every
 * 0.1 s for about 4 s here, to keep the suite short: the minute of
 * rounds at the default 10 s is 6 rounds, this is 40) never wake it, as
 * llama-server's own `/props` and log say; a completion wakes it and the
 * launcher shows `ready` before llama-server sleeps again (2 s idle), its
 * tokens counted from `/metrics`.
 * Without the build it fails saying how to build it.
 */
import assert from "node:assert/strict";
import { models, readJournal, waitFor } from "../support/helpers.ts";
import { llamaLauncher, untilSleeping } from "../support/llama.ts";

const KEY = "sleepy-key";
const CATALOGUE = `models:
  dozy:
    verb: complete
    local: tiny-llama
    engine: llama.cpp
    args: { ctx-size: 256, parallel: 1, threads: 1, no-warmup: true, sleep-idle-seconds: 2 }
`;

Deno.test("a llama-server set to sleep when idle: sleeping, never woken by the launcher's rounds, ready after a completion before it sleeps again", async () => {
  const { root, port, launcher } = await llamaLauncher(
    ["dozy"],
    CATALOGUE,
    ["--grace", "5", "--health-interval", "0.1", "--canary-interval", "1"],
    KEY,
  );
  const engine = `http://127.0.0.1:${port + 1}`;
  const auth = { authorization: `Bearer ${KEY}` };
  const props = async () =>
    (await (await fetch(`${engine}/props`, { headers: auth })).json())
      .is_sleeping;
  const detail = async () => (await models(port, true)).active.dozy!;
  try {
    await launcher.ready();
    await untilSleeping(detail);
    const asleep = await detail();
    assert.equal(asleep.healthy, true);
    assert.equal(await props(), true);
    const log = `${root}/logs/dozy.log`;
    const wakes = async () =>
      (await Deno.readTextFile(log)).split("exiting sleeping state").length - 1;
    const wokenBefore = await wakes();
    // About 40 of the launcher's rounds (0.1 s apart): /health, /props,
    // /metrics each time.
    const until = Date.now() + 4_000;
    while (Date.now() < until) {
      const e = await detail();
      assert.equal(e.state, "sleeping");
      assert.equal(e.healthy, true);
      assert.equal(e.canary, null, "no canary to an engine set to sleep");
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(await props(), true, "llama-server's own /props: asleep");
    assert.equal(await wakes(), wokenBefore, "its log: never woken");
    const tokensBefore = (await detail()).traffic;
    assert.ok(tokensBefore, "traffic is read while it sleeps");
    const answer = await fetch(`${engine}/v1/completions`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ prompt: "hello there", max_tokens: 4 }),
    });
    assert.equal(answer.status, 200);
    const usage = (await answer.json()).usage;
    // Awake for 2 s (its sleep-idle-seconds), then asleep again: the launcher
    // sees the wake inside that window or never (the journal's order below).
    await waitFor(
      async () => (await detail()).state === "ready",
      "ready after the completion",
    );
    const file = `${root}/metrics/mymodel_serve_${port}.prom`;
    await waitFor(async () => {
      const text = await Deno.readTextFile(file);
      const m = /mymodel_engine_generated_tokens_total\{model="dozy"\} (\d+)/
        .exec(text);
      return Number(m?.[1] ?? 0) >= usage.completion_tokens;
    }, "its generated tokens counted");
    // Its wake loads the model again (server-context.cpp handle_sleeping_state):
    // measured anew, the same figures, not added to the first load's.
    const figures = (f: object | null | undefined) =>
      JSON.stringify({ ...f, measured_at: null });
    await waitFor(
      async () =>
        (await detail()).footprint?.measured_at !==
          asleep.footprint?.measured_at,
      "the wake's load measured",
    );
    const woke = (await detail()).footprint;
    assert.equal(figures(woke), figures(asleep.footprint));
    // The journal is written in the background: wait for the waking line.
    let moves: string[] = [];
    await waitFor(async () => {
      moves = (await readJournal(root))
        .filter((e) => e.model === "dozy" && e.event === "state")
        .map((e) => `${e.from}>${e.to}`);
      return moves.includes("sleeping>ready");
    }, "the wake in the journal");
    const slept = moves.indexOf("ready>sleeping");
    assert.ok(slept > 0, moves.join(", "));
    assert.equal(moves[slept + 1], "sleeping>ready", moves.join(", "));
  } finally {
    await launcher.stop();
    await Deno.remove(root, { recursive: true }).catch(() => {});
  }
});
