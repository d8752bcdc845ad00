/**
 * A drain that is the engine's own SIGTERM (issue 47, item 12), through the
 * real command line over the stand-in engine playing vLLM with
 * `--shutdown-timeout` (tests/fixtures/fake_engine.ts: 503 to arrivals, the
 * requests in flight finished, then exit): under steady traffic a reload's
 * restart cuts none of the streams in flight at its start, the arrivals are
 * refused, and the drain ends when the engine exits, not at its deadline.
 */
import assert from "node:assert/strict";
import {
  launch,
  models,
  readJournal,
  readRecord,
  waitFor,
} from "../support/helpers.ts";
import { streamWhole } from "../support/streams.ts";

function card(extra: string): string {
  return `models:\n  steady: { verb: chat, hub: org/steady, args: { fake-metrics: vllm, fake-tokens: 30, fake-token-ms: 100, shutdown-timeout: 30, max-model-len: ${extra} } }\n`;
}

interface Answer {
  began: number;
  ended: number;
  status: number; // 0: no connection
  text: string;
}

/** One client: a stream, then the next, until `stop`. */
async function client(
  port: number,
  delayMs: number,
  stop: AbortSignal,
  out: Answer[],
): Promise<void> {
  await new Promise((r) => setTimeout(r, delayMs));
  while (!stop.aborted) {
    const began = Date.now();
    let status = 0;
    let text = "";
    try {
      const response = await fetch(
        `http://127.0.0.1:${port}/v1/chat/completions`,
        {
          method: "POST",
          body: JSON.stringify({
            messages: [{ role: "user", content: "one two" }],
            stream: true,
          }),
        },
      );
      status = response.status;
      text = await response.text();
    } catch {
      // Refused between runs, or cut mid-stream (status stays 200, text short).
    }
    out.push({ began, ended: Date.now(), status, text });
    await new Promise((r) => setTimeout(r, status === 200 ? 20 : 100));
  }
}

interface Event {
  at: string;
  event: string;
  to?: string | null;
  reason: string | null;
  detail: string | null;
  drain?: { seconds: number; finished: number; cut: number };
}

Deno.test("self-drain: a reload's restart of a vLLM card with --shutdown-timeout under steady traffic cuts nothing in flight at its start, refuses arrivals, ends at the engine's exit", async () => {
  const dir = await Deno.makeTempDir({ prefix: "serve-self-drain-" });
  const path = `${dir}/catalogue.yaml`;
  await Deno.writeTextFile(path, card("4096"));
  try {
    await using s = await launch(["steady"], {
      catalogue: path,
      args: ["--drain-timeout", "20"],
    });
    await s.launcher.ready();
    await waitFor(
      async () => (await models(s.port, true)).active.steady?.state === "ready",
      "steady ready",
    );
    const old = (await readRecord(s.records, s.port + 1))!;
    const stop = new AbortController();
    const answers: Answer[] = [];
    // Three clients, a second apart: their 3 s streams never all end at once.
    const clients = [0, 1000, 2000].map((ms) =>
      client(s.port + 1, ms, stop.signal, answers)
    );
    await waitFor(() => answers.length >= 4, "steady traffic", 20_000);
    await Deno.writeTextFile(path, card("8192"));
    s.launcher.child.kill("SIGHUP");
    await waitFor(
      async () =>
        (await readRecord(s.records, s.port + 1))?.pid !== old.pid &&
        (await models(s.port, true)).active.steady?.state === "ready",
      `the new run ready:\n${s.launcher.stderr}`,
      30_000,
    );
    const readyAt = Date.now();
    await waitFor(
      () => answers.some((a) => a.status === 200 && a.began >= readyAt),
      "the new run serving the clients",
      15_000,
    );
    stop.abort();
    await Promise.all(clients);

    const events = await readJournal<Event>(s.root);
    const drain = events.find((e) => e.event === "drain");
    assert.equal(drain?.reason, "drained", JSON.stringify(drain));
    assert.equal(drain?.drain?.cut, 0);
    const start = Date.parse(
      events.find((e) => e.event === "state" && e.to === "draining")!.at,
    );
    const end = Date.parse(
      events.find((e) => e.event === "state" && e.to === "stopping")!.at,
    );
    const held = answers.filter((a) =>
      a.status === 200 && a.began < start && a.ended > start
    );
    assert.ok(
      held.length >= 2,
      `streams in flight at the start: ${held.length}`,
    );
    for (const a of held) {
      assert.ok(streamWhole(a.text, 30), `cut: ${a.text.slice(-120)}`);
    }
    assert.ok(
      (drain?.drain?.finished ?? 0) >= held.length,
      JSON.stringify(drain),
    );
    // Arrivals during the drain: refused by the engine, none admitted and cut.
    const during = answers.filter((a) => a.began > start && a.ended < end);
    assert.ok(during.some((a) => a.status === 503), JSON.stringify(during));
    assert.ok(during.every((a) => a.status !== 200), JSON.stringify(during));
    // The drain ended when the longest of those ended, not at its deadline.
    const longest = Math.max(...held.map((a) => a.ended));
    assert.ok(end >= longest, `the drain ended (${end}) after ${longest}`);
    for (const a of answers.filter((a) => a.status === 200)) {
      assert.ok(streamWhole(a.text, 30), `a stream cut: ${a.text.slice(-120)}`);
    }
    assert.match(
      s.launcher.stderr,
      /engine steady \(pid \d+\) drained in [\d.]+ s: \d+ requests? finished, 0 cut/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
