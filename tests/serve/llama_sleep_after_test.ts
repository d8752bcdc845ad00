/**
 * `sleep_after` on a card, with the real llama-server (`deno task
 * engine:llama`) over the tiny model: the launcher passes
 * `--sleep-idle-seconds`, moves the engine to `sleeping` on its own
 * `handle_sleep` line, measures what it keeps (its resident memory on CPU),
 * and a chat request wakes it: the wake's seconds, the journal's reasons and
 * the metrics file say so, and its tokens prove the wake (no canary). A wake whose reload fails (its model file gone)
 * ends the run as `wake-failed` with the engine's own line.
 * Without the build it fails saying how to build it.
 */
import assert from "node:assert/strict";
import { models, readJournal, waitFor } from "../support/helpers.ts";
import { llamaLauncher, untilSleeping } from "../support/llama.ts";

const KEY = "sleepy-key";

function catalogue(restart = "on-failure"): string {
  return `models:
  dozy:
    verb: chat
    local: tiny-llama
    engine: llama.cpp
    sleep_after: 2
    restart: ${restart}
    args: { ctx-size: 256, parallel: 1, threads: 1, no-warmup: true }
`;
}

async function start(restart?: string) {
  const { root, port, model, launcher } = await llamaLauncher(
    ["dozy"],
    catalogue(restart),
    ["--grace", "5", "--health-interval", "0.2", "--canary-interval", "1"],
    KEY,
  );
  const detail = async () => (await models(port, true)).active.dozy!;
  const chat = () =>
    fetch(`http://127.0.0.1:${port + 1}/v1/chat/completions`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${KEY}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({
        messages: [{ role: "user", content: "hello" }],
        max_tokens: 2,
      }),
    });
  const journal = async () =>
    (await readJournal(root)).filter((e) => e.model === "dozy");
  return { root, port, model, launcher, detail, chat, journal };
}

Deno.test("a llama.cpp card with sleep_after: 2 sleeps on its own line, shows its residue, is woken by a chat request, and the journal says both", async () => {
  const { root, port, launcher, detail, chat, journal } = await start();
  try {
    await launcher.ready();
    await untilSleeping(detail);
    const log = await Deno.readTextFile(`${root}/logs/dozy.log`);
    assert.match(log, /--sleep-idle-seconds 2/, "sleep_after reached its argv");
    // Its residue is measured at a round after the sleep has settled.
    let asleep = await detail();
    await waitFor(async () => {
      asleep = await detail();
      return typeof asleep.sleep?.residue_bytes === "number";
    }, "its residue measured");
    const sleep = asleep.sleep!;
    assert.equal(asleep.state, "sleeping");
    assert.equal(sleep.by, "rss");
    assert.ok(sleep.residue_bytes! > 1_000_000, "a process keeps MBs");
    assert.ok(sleep.awake_bytes! > 1_000_000, "measured awake first");
    assert.equal(
      sleep.freed_bytes,
      Math.max(sleep.awake_bytes! - sleep.residue_bytes!, 0),
    );
    assert.equal(sleep.after_seconds, 2);
    assert.equal(sleep.sleeps, 1);
    assert.equal(asleep.canary, null, "no canary ever woke it");
    let said: Record<string, unknown>[] = [];
    await waitFor(async () => {
      said = (await journal()).filter((e) => e.event === "sleep");
      return said.some((e) => e.reason === "asleep");
    }, "the sleep in the journal");
    assert.match(
      String(said.find((e) => e.reason === "asleep")!.detail),
      /^asleep after 2 s idle: freed [\d.]+ [MG]iB, keeps [\d.]+ [MG]iB$/,
    );
    const answer = await chat();
    assert.equal(answer.status, 200);
    assert.ok((await answer.json()).choices.length > 0);
    let woken = await detail();
    await waitFor(async () => {
      woken = await detail();
      return woken.sleep?.wakes === 1;
    }, "the wake counted");
    // The chat request's own tokens on its counters prove the wake: no canary.
    await waitFor(async () => {
      woken = await detail();
      return woken.sleep?.last_wake_check?.ok === true;
    }, "the wake proven");
    assert.equal(woken.sleep!.last_wake_check!.by, "request");
    const { last_wake_seconds: seconds, wake_seconds_sum } = woken.sleep!;
    assert.ok(seconds! >= 0 && seconds! < 30, `woke in ${seconds} s`);
    assert.equal(wake_seconds_sum, seconds);
    await waitFor(async () => {
      said = (await journal()).filter((e) => e.event === "sleep");
      return said.some((e) => e.reason === "woken");
    }, "the wake in the journal");
    assert.match(
      String(said.find((e) => e.reason === "woken")!.detail),
      /^woken by a request in \d+\.\d\d s$/,
    );
    const moves = (await journal()).filter((e) => e.event === "state")
      .map((e) => `${e.from}>${e.to}`);
    const slept = moves.indexOf("ready>sleeping");
    assert.ok(slept > 0, moves.join(", "));
    assert.equal(moves[slept + 1], "sleeping>ready", moves.join(", "));
    const file = `${root}/metrics/mymodel_serve_${port}.prom`;
    await waitFor(async () => {
      const text = await Deno.readTextFile(file);
      return /mymodel_engine_wake_duration_seconds_count\{model="dozy"\} 1\n/
        .test(text) &&
        /mymodel_engine_sleeps_total\{model="dozy"\} [1-9]/.test(text) &&
        /mymodel_engine_sleep_residue_bytes\{model="dozy"\} \d+/.test(text);
    }, "sleeps, wakes and residue in the metrics file");
    // Asleep again: the launcher's rounds (health, /props, /metrics), no
    // canary, and a stop's drain never wake it (its log says exits).
    await waitFor(async () => {
      const e = await detail();
      return e.state === "sleeping" && e.sleep?.sleeps === 2;
    }, "asleep again");
    await launcher.stop();
    const exits = (await Deno.readTextFile(`${root}/logs/dozy.log`))
      .split("handle_sleep: server is exiting sleeping state").length - 1;
    assert.equal(exits, 1, "woken once: by the chat request");
  } finally {
    await launcher.stop();
    await Deno.remove(root, { recursive: true }).catch(() => {});
  }
});

Deno.test("a llama-server whose wake cannot reload its model ends as wake-failed with its own line, then the restart policy", async () => {
  const { root, model, launcher, detail, chat, journal } = await start();
  try {
    await launcher.ready();
    await untilSleeping(detail);
    await Deno.remove(model); // the reload of the wake cannot open it
    await chat().then((r) => r.body?.cancel()).catch(() => {});
    let end = await detail();
    await waitFor(async () => {
      end = await detail();
      return end.last_exit !== null;
    }, "the run ended");
    assert.equal(end.last_exit!.cause, "wake-failed");
    assert.match(
      String(end.last_exit!.message),
      /failed to reload model after sleeping/,
    );
    await waitFor(
      async () =>
        (await journal()).some((e) =>
          e.event === "state" && e.to === "backoff" &&
          e.reason === "wake-failed"
        ),
      "restarted by policy",
    );
  } finally {
    await launcher.stop();
    await Deno.remove(root, { recursive: true }).catch(() => {});
  }
});
