/**
 * Is it serving (issue 36), through the real command line over stand-in
 * engines that serve each engine's real `/metrics` text
 * (tests/fixtures/fake_engine.ts): traffic in `?detail=1` and the metrics
 * file, read with the engine's key; an engine stalled under load, or wedged
 * idle and caught by the canary, restarted with cause `stalled`; slow
 * progress spared; bad metrics endpoints costing one warning; a vLLM engine
 * asleep and awake. Short values throughout (`--health-interval 0.2`).
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

type Detail = Awaited<ReturnType<typeof models>>["active"][string];

/** A catalogue of vLLM-kind stand-in cards, written to the root. */
async function catalogue(
  root: string,
  cards: Record<string, string>,
): Promise<string> {
  const file = `${root}/serving.yaml`;
  const lines = Object.entries(cards).map(([name, rest]) =>
    `  ${name}: { verb: chat, hub: org/${name}, ${rest} }`
  );
  await Deno.writeTextFile(file, `models:\n${lines.join("\n")}\n`);
  return file;
}

async function start(
  cards: Record<string, string>,
  args: string[],
  env: Record<string, string> = {},
): Promise<Setup> {
  const root = await makeRoot();
  const setup = await launch(Object.keys(cards), {
    root,
    catalogue: await catalogue(root, cards),
    args: ["--health-interval", "0.2", "--grace", "1", ...args],
    env,
  });
  await setup.launcher.ready();
  return setup;
}

async function detail(setup: Setup, name: string): Promise<Detail> {
  return (await models(setup.port, true)).active[name]!;
}

/** Starts `n` streamed chat completions at the engine, left running; `done` ends them. */
function load(
  setup: Setup,
  index: number,
  n: number,
  key = "",
): { done: () => Promise<void> } {
  const abort = new AbortController();
  const runs = Array.from(
    { length: n },
    () =>
      fetch(`http://127.0.0.1:${setup.port + 1 + index}/v1/chat/completions`, {
        method: "POST",
        signal: abort.signal,
        headers: {
          "content-type": "application/json",
          ...key ? { authorization: `Bearer ${key}` } : {},
        },
        body: JSON.stringify({
          messages: [{ role: "user", content: "hello there" }],
          stream: true,
        }),
      }).then((r) => r.text()).catch(() => ""),
  );
  return {
    async done() {
      abort.abort();
      await Promise.all(runs);
    },
  };
}

Deno.test("traffic: ?detail=1 and the metrics file count the engine's requests and tokens, read with its API key", async () => {
  await using setup = await start(
    {
      busy: "args: { fake-metrics: vllm, fake-tokens: 400, fake-token-ms: 20 }",
    },
    [],
    { LOCAL_ENGINE_API_KEY: "sekret" },
  );
  await waitFor(
    async () => (await detail(setup, "busy")).traffic != null,
    "a first reading",
  );
  const idle = await detail(setup, "busy");
  assert.equal(idle.state, "ready");
  assert.equal(idle.traffic!.running, 0);
  assert.equal(idle.canary, null);
  const work = load(setup, 0, 2, "sekret");
  try {
    let seen: Detail["traffic"] = null;
    await waitFor(async () => {
      seen = (await detail(setup, "busy")).traffic ?? null;
      return seen !== null && seen.running === 2 &&
        (seen.tokens_per_s ?? 0) > 0;
    }, "two requests running, tokens flowing");
    const file = `${setup.root}/metrics/mymodel_serve_${setup.port}.prom`;
    await waitFor(async () => {
      const text = await Deno.readTextFile(file).catch(() => "");
      return /mymodel_engine_requests_running\{model="busy"\} 2\n/.test(text) &&
        /mymodel_engine_requests_waiting\{model="busy"\} 0\n/.test(text) &&
        /mymodel_engine_generated_tokens_total\{model="busy"\} [1-9]/.test(
          text,
        );
    }, "the metrics file's traffic");
  } finally {
    await work.done();
  }
  assert.doesNotMatch(setup.launcher.stderr, /cannot read its traffic/);
});

Deno.test("stalled under load: requests running, counters frozen past --stall-timeout: stopped, cause stalled, restarted", async () => {
  await using setup = await start(
    {
      wedge:
        "args: { fake-metrics: vllm, fake-tokens: 1000, fake-token-ms: 20, fake-wedge-after-ms: 2500 }",
    },
    ["--stall-timeout", "1", "--canary-interval", "0"],
  );
  await waitFor(
    async () => (await detail(setup, "wedge")).state === "ready",
    "ready",
  );
  const work = load(setup, 0, 3);
  try {
    await waitFor(
      async () => ((await detail(setup, "wedge")).restarts ?? 0) >= 1,
      "a restart after the stall",
      20_000,
    );
  } finally {
    await work.done();
  }
  const seen = await detail(setup, "wedge");
  assert.equal(seen.last_exit?.cause, "stalled");
  assert.equal(seen.last_exit?.reason, "stalled");
  assert.match(
    seen.last_exit?.message ?? "",
    /^3 requests running, no token for [12] s$/,
  );
  assert.match(setup.launcher.stderr, /stalled: 3 requests running, no token/);
  const events = await readJournal(setup.root);
  assert.ok(
    events.some((e) =>
      e.model === "wedge" && e.to === "stopping" && e.reason === "stalled"
    ),
  );
  assert.ok(
    events.some((e) =>
      e.model === "wedge" && e.to === "backoff" && e.reason === "stalled"
    ),
  );
  const metrics = await Deno.readTextFile(
    `${setup.root}/metrics/mymodel_serve_${setup.port}.prom`,
  );
  assert.match(
    metrics,
    /mymodel_engine_exits_total\{model="wedge",cause="stalled"\} 1\n/,
  );
  // The new run's counter starts at 0: the total keeps the first run's tokens.
  await waitFor(async () => {
    const e = await detail(setup, "wedge");
    // Traffic shows once the new run is read (a new run starts unknown).
    return e.state === "ready" && e.traffic != null;
  }, "the new run read");
  await new Promise((r) => setTimeout(r, 1_000)); // rounds rewrite the file
  const after = await Deno.readTextFile(
    `${setup.root}/metrics/mymodel_serve_${setup.port}.prom`,
  );
  const total = /mymodel_engine_generated_tokens_total\{model="wedge"\} (\d+)/
    .exec(after)?.[1];
  assert.ok(Number(total) > 0, `generated tokens after the restart: ${total}`);
});

Deno.test("stalled with requests waiting and none running: counters frozen past --stall-timeout: stopped, cause stalled", async () => {
  // An engine whose scheduler admits nothing: each request waits, none runs.
  await using setup = await start(
    { queued: "args: { fake-metrics: vllm, fake-slots: 0 }" },
    ["--stall-timeout", "1", "--canary-interval", "0"],
  );
  await waitFor(
    async () => (await detail(setup, "queued")).traffic != null,
    "a first reading",
  );
  const work = load(setup, 0, 3);
  try {
    await waitFor(
      async () => ((await detail(setup, "queued")).restarts ?? 0) >= 1,
      "a restart after the stall",
      10_000,
    );
  } finally {
    await work.done();
  }
  const seen = await detail(setup, "queued");
  assert.equal(seen.last_exit?.cause, "stalled");
  assert.match(
    seen.last_exit?.message ?? "",
    /^3 requests waiting, none running, no token for [12] s$/,
  );
});

Deno.test("slow progress is progress: a slow token, or only the prompt counter moving, never stalls; real traffic sends no canary", async () => {
  await using setup = await start(
    {
      slowtok:
        "args: { fake-metrics: vllm, fake-tokens: 12, fake-token-ms: 600 }",
      prefill: "args: { fake-metrics: vllm, fake-prefill-ms: 5000 }",
    },
    ["--stall-timeout", "1.5", "--canary-interval", "1"],
  );
  await waitFor(async () => {
    const body = await models(setup.port, true);
    return Object.values(body.active).every((e) => e.traffic != null);
  }, "first readings");
  const a = load(setup, 0, 1);
  const b = load(setup, 1, 1);
  try {
    const until = Date.now() + 6_000;
    while (Date.now() < until) {
      const body = await models(setup.port, true);
      for (const [name, e] of Object.entries(body.active)) {
        assert.equal(e.state, "ready", `${name}: ${JSON.stringify(e)}`);
        assert.equal(e.restarts, 0, name);
        assert.equal(e.canary, null, `${name}: no canary while it works`);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  } finally {
    await a.done();
    await b.done();
  }
  assert.doesNotMatch(setup.launcher.stderr, /stalled/);
});

Deno.test("stalled while idle: a wedge with the running gauge at 0 is caught by two failed canaries", async () => {
  await using setup = await start(
    {
      quiet:
        "args: { fake-metrics: vllm, fake-wedge-after-ms: 2500, fake-wedge-gauge: zero }",
    },
    [
      "--canary-interval",
      "0.5",
      "--canary-timeout",
      "0.5",
      "--stall-timeout",
      "1",
    ],
  );
  let ok: Detail["canary"] = null;
  await waitFor(
    async () => {
      const e = await detail(setup, "quiet");
      if (e.canary?.ok) ok = e.canary;
      return (e.restarts ?? 0) >= 1;
    },
    "a restart after two failed canaries",
    20_000,
  );
  assert.ok(ok, "a canary answered before the wedge");
  const seen = await detail(setup, "quiet");
  assert.equal(seen.last_exit?.cause, "stalled");
  assert.match(
    seen.last_exit?.message ?? "",
    /^2 canary requests in a row failed \(no answer within 0\.5 s\)$/,
  );
  const events = await readJournal(setup.root);
  const failures = events.filter((e) =>
    e.model === "quiet" && e.event === "canary"
  );
  assert.ok(failures.length >= 2);
  assert.match(
    String(failures[0]!.detail),
    /^canary \/v1\/chat\/completions failed: no answer within 0\.5 s$/,
  );
});

Deno.test("stalled while idle: an engine that prefills but never decodes is restarted by two failed canaries, their own prompts moving its prompt counter", async () => {
  await using setup = await start(
    {
      prefills:
        "args: { fake-metrics: vllm, fake-wedge-after-ms: 1500, fake-wedge-gauge: zero, fake-wedge-at: decode }",
    },
    [
      "--canary-interval",
      "0.5",
      "--canary-timeout",
      "0.5",
      "--stall-timeout",
      "1",
    ],
  );
  let seen: Detail | undefined;
  const prompts = new Set<number>();
  await waitFor(
    async () => {
      seen = await detail(setup, "prefills");
      const text = await fetch(
        `http://127.0.0.1:${setup.port + 1}/metrics`,
      ).then((r) => r.text()).catch(() => "");
      const prompt = /^vllm:prompt_tokens_total\{[^}]*\} (\S+)$/m.exec(text);
      if (seen.restarts === 0 && prompt) prompts.add(Number(prompt[1]));
      return (seen.restarts ?? 0) >= 1;
    },
    "a restart after two failed canaries",
    15_000,
  );
  // The precondition: each canary's prompt moved the counter while it failed.
  assert.ok(prompts.size >= 3, `prompt counter read: ${[...prompts]}`);
  // The first run's failures: the second in a row restarts it.
  const streak = setup.launcher.stderr.split("\n")
    .filter((l) => l.includes("canary /v1/chat/completions failed"))
    .map((l) => /\((\d+) in a row\)/.exec(l)?.[1]);
  assert.deepEqual(streak.slice(0, 2), ["1", "2"], setup.launcher.stderr);
  assert.equal(seen!.last_exit?.cause, "stalled");
  assert.match(
    seen!.last_exit?.message ?? "",
    /^2 canary requests in a row failed \(no answer within 0\.5 s\)$/,
  );
});

Deno.test("bad metrics endpoints (garbage, 404, 50 MB, never): one warning per engine, traffic null, nothing else changes", async () => {
  const bad = ["garbage", "404", "huge", "hang"];
  await using setup = await start(
    Object.fromEntries(
      bad.map((b) => [`bad-${b}`, `args: { fake-metrics-bad: "${b}" }`]),
    ),
    ["--canary-interval", "0.5"],
  );
  await waitFor(async () => {
    const body = await models(setup.port, true);
    return Object.values(body.active).every((e) => e.state === "ready");
  }, "all ready");
  // Rounds go on for 4 s (the hanging one costs its 2 s timeout each).
  const until = Date.now() + 4_000;
  while (Date.now() < until) {
    const began = performance.now();
    const body = await models(setup.port, true);
    assert.ok(
      performance.now() - began < 1_000,
      "GET /models never waits for a metrics read",
    );
    for (const [name, e] of Object.entries(body.active)) {
      assert.equal(e.state, "ready", name);
      assert.equal(e.healthy, true, name);
      assert.equal(e.traffic, null, name);
      assert.equal(e.restarts, 0, name);
      assert.equal(e.canary, null, `${name}: no canary on unknown traffic`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  for (const b of bad) {
    const warnings = setup.launcher.lines.filter((l) =>
      l.includes(`engine bad-${b}: cannot read its traffic`)
    );
    assert.equal(warnings.length, 1, `bad-${b}:\n${setup.launcher.stderr}`);
  }
  const said = setup.launcher.stderr;
  assert.match(
    said,
    /bad-garbage: .*: no vllm:num_requests_running in its answer/,
  );
  assert.match(said, /bad-404: .*: answered 404/);
  assert.match(said, /bad-huge: .*: its answer passed 4194304 bytes/);
  assert.match(said, /bad-hang: .*: no answer within 2 s/);
});

Deno.test("sleeping: a vLLM engine in development mode is sleeping after POST /sleep, ready after POST /wake_up, healthy throughout", async () => {
  await using setup = await start(
    {
      dozy: "env: { VLLM_SERVER_DEV_MODE: '1' }, args: { fake-metrics: vllm }",
    },
    ["--canary-interval", "0.2"],
  );
  await waitFor(
    async () => (await detail(setup, "dozy")).traffic != null,
    "a first reading",
  );
  const engine = `http://127.0.0.1:${setup.port + 1}`;
  await (await fetch(`${engine}/sleep?level=1`, { method: "POST" })).body
    ?.cancel();
  await waitFor(
    async () => (await detail(setup, "dozy")).state === "sleeping",
    "sleeping",
  );
  const asleep = await detail(setup, "dozy");
  assert.equal(asleep.healthy, true);
  const canary = asleep.canary;
  // Rounds go on: it stays asleep, gets no canary, is not stalled.
  await new Promise((r) => setTimeout(r, 1_500));
  const still = await detail(setup, "dozy");
  assert.equal(still.state, "sleeping");
  assert.deepEqual(still.canary, canary);
  const metrics = await Deno.readTextFile(
    `${setup.root}/metrics/mymodel_serve_${setup.port}.prom`,
  );
  assert.match(
    metrics,
    /mymodel_engine_state\{model="dozy",state="sleeping"\} 1\n/,
  );
  assert.match(metrics, /mymodel_engine_up\{model="dozy",[^}]*\} 1\n/);
  await (await fetch(`${engine}/wake_up`, { method: "POST" })).body?.cancel();
  await waitFor(
    async () => (await detail(setup, "dozy")).state === "ready",
    "awake",
  );
  // The journal is written in the background: wait for the awake line.
  let moves: string[] = [];
  await waitFor(async () => {
    moves = (await readJournal(setup.root))
      .filter((e) => e.model === "dozy" && e.event === "state")
      .map((e) => `${e.from}>${e.to}:${e.reason}`);
    return moves.at(-1) === "sleeping>ready:awake";
  }, "awake in the journal");
  assert.deepEqual(moves.slice(-2), [
    "ready>sleeping:asleep",
    "sleeping>ready:awake",
  ]);
});
