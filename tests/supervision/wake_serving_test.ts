/**
 * Issue 53 item 5 through the real command line, over stand-in llama-servers
 * (tests/fixtures/fake_engine.ts, `--sleep-idle-seconds`) that sleep and are
 * woken by a chat request: one whose wake answers with tokens is proven by
 * its own counters; one whose wake answers 200 with nothing behind it
 * (`--fake-wake-empty`) is caught by the canary of one token that follows,
 * journaled, stopped as `stalled` and restarted by the policy.
 */
import assert from "node:assert/strict";
import {
  launch,
  makeRoot,
  models,
  readJournal,
  type Setup,
  waitFor,
} from "../support/helpers.ts";

const CARDS = `models:
  dozy:
    verb: chat
    hub: org/dozy
    engine: llama.cpp
    sleep_after: 4
    args: { fake-metrics: llama.cpp }
  hollow:
    verb: chat
    hub: org/hollow
    engine: llama.cpp
    sleep_after: 4
    args: { fake-metrics: llama.cpp, fake-wake-empty: true }
`;

type Detail = Awaited<ReturnType<typeof models>>["active"][string];

async function detail(setup: Setup, name: string): Promise<Detail> {
  return (await models(setup.port, true)).active[name]!;
}

function chat(setup: Setup, index: number): Promise<unknown> {
  return fetch(
    `http://127.0.0.1:${setup.port + 1 + index}/v1/chat/completions`,
    {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ messages: [{ role: "user", content: "hello" }] }),
    },
  ).then((r) => r.json());
}

Deno.test("a stand-in woken by a chat request: its tokens prove the wake; a wake that answers 200 with no token is caught by a canary of one token, journaled, and restarted as stalled", async () => {
  const root = await makeRoot();
  const file = `${root}/wake.yaml`;
  await Deno.writeTextFile(file, CARDS);
  await using setup = await launch(["dozy", "hollow"], {
    root,
    catalogue: file,
    args: ["--health-interval", "0.2", "--grace", "1"],
  });
  await setup.launcher.ready();
  for (const name of ["dozy", "hollow"]) {
    await waitFor(
      async () => (await detail(setup, name)).state === "sleeping",
      `${name} sleeping`,
      20_000,
    );
  }
  const [woke, hollow] = await Promise.all([chat(setup, 0), chat(setup, 1)]);
  assert.equal(
    (woke as { usage: { completion_tokens: number } }).usage.completion_tokens,
    8,
  );
  assert.deepEqual((hollow as { choices: unknown[] }).choices, []);
  let dozy = await detail(setup, "dozy");
  await waitFor(async () => {
    dozy = await detail(setup, "dozy");
    return dozy.sleep?.last_wake_check?.ok === true;
  }, "dozy's wake proven");
  assert.equal(dozy.sleep!.last_wake_check!.by, "request");
  assert.equal(dozy.sleep!.wakes, 1);
  let ended = await detail(setup, "hollow");
  await waitFor(async () => {
    ended = await detail(setup, "hollow");
    return ended.last_exit != null;
  }, "hollow stopped");
  assert.equal(ended.last_exit!.cause, "stalled");
  assert.match(String(ended.last_exit!.message), /no token/);
  let journal: Record<string, unknown>[] = [];
  await waitFor(async () => {
    journal = (await readJournal(root)).filter((e) => e.model === "hollow");
    return journal.some((e) => e.to === "backoff" && e.reason === "stalled");
  }, "restarted by the policy");
  const failed = journal.find((e) => e.reason === "wake-check-failed");
  assert.equal(failed?.event, "sleep");
  assert.match(String(failed!.detail), /canary .*no token/);
  assert.match(
    setup.launcher.stderr,
    /engine hollow \(pid \d+\) .*no token/,
  );
  await waitFor(
    async () => (await detail(setup, "hollow")).restarts === 1,
    "hollow restarted",
  );
  assert.equal((await detail(setup, "dozy")).last_exit, null);
});
