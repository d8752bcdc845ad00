/**
 * The drain before a planned stop (issue 37), through the real command line
 * over stand-in engines that stream tokens slowly and serve vLLM's own
 * `/metrics` (tests/fixtures/fake_engine.ts `--fake-metrics vllm`): a reload's
 * restart and a stop wait for a stream; a deadline cuts and counts; a second
 * signal skips the wait; a crash is never drained.
 */
import assert from "node:assert/strict";
import {
  launch,
  Launcher,
  makeRoot,
  models,
  pidAlive,
  readJournal,
  readRecord,
  type Setup,
  waitFor,
} from "../support/helpers.ts";
import {
  type ChatStream,
  chatStream,
  streamWhole,
} from "../support/streams.ts";

/** 30 tokens, one every `ms`: a stream of 30 × `ms`. */
function card(name: string, ms: number, extra = ""): string {
  return `  ${name}: { verb: chat, hub: org/${name}, args: { fake-metrics: vllm, fake-tokens: 30, fake-token-ms: ${ms}, max-model-len: 4096${extra} } }\n`;
}

async function catalogue(text: string): Promise<
  { path: string; write(text: string): Promise<void> } & AsyncDisposable
> {
  const dir = await Deno.makeTempDir({ prefix: "serve-drain-cat-" });
  const path = `${dir}/catalogue.yaml`;
  await Deno.writeTextFile(path, `models:\n${text}`);
  return {
    path,
    write: (next) => Deno.writeTextFile(path, `models:\n${next}`),
    async [Symbol.asyncDispose]() {
      await Deno.remove(dir, { recursive: true });
    },
  };
}

function whole(text: string): boolean {
  return streamWhole(text, 30);
}

async function ready(s: Setup, name: string): Promise<void> {
  await waitFor(
    async () => (await models(s.port, true)).active[name]?.state === "ready",
    `${name} ready`,
  );
}

interface Event {
  model: string | null;
  event: string;
  from: string | null;
  to: string | null;
  reason: string | null;
  detail: string | null;
  drain?: { seconds: number; finished: number; cut: number };
}

const journal = (root: string) => readJournal<Event>(root);

async function hup(s: Setup): Promise<string> {
  const before =
    s.launcher.lines.filter((l) => /reload( refused)?: /.test(l)).length;
  s.launcher.child.kill("SIGHUP");
  let line = "";
  await waitFor(
    () => {
      const lines = s.launcher.lines.filter((l) =>
        /reload( refused)?: /.test(l)
      );
      line = lines[before] ?? "";
      return line !== "";
    },
    `a reload line in:\n${s.launcher.stderr}`,
    20_000,
  );
  return line;
}

Deno.test("drain: a stream crossing a reload of its card finishes whole; the new run starts after it", async () => {
  await using cat = await catalogue(card("streamer", 100));
  await using s = await launch(["streamer"], { catalogue: cat.path });
  await s.launcher.ready();
  await ready(s, "streamer");
  const old = (await readRecord(s.records, s.port + 1))!;
  const flow = chatStream(s.port + 1);
  await waitFor(() => flow.tokens >= 2, "the stream under way");
  await cat.write(card("streamer", 100).replace("4096", "8192"));
  const reloaded = hup(s);
  let seen: Awaited<ReturnType<typeof models>>["active"][string] | undefined;
  await waitFor(async () => {
    seen = (await models(s.port, true)).active.streamer;
    return seen?.state === "draining";
  }, "streamer draining");
  assert.equal(seen?.healthy, false, "a draining engine takes no new work");
  assert.ok(seen?.drain, "?detail=1 shows the drain");
  assert.ok(Date.parse(seen.drain.deadline) > Date.parse(seen.drain.since));
  assert.match(await reloaded, /reload: 1 engine restarted \(streamer\)$/);
  const { text, endedAt } = await flow.done;
  assert.ok(whole(text), `the stream finished whole:\n${text.slice(-200)}`);
  let fresh = old;
  await waitFor(async () => {
    fresh = (await readRecord(s.records, s.port + 1)) ?? old;
    return fresh.pid !== old.pid;
  }, "the new run");
  assert.ok(
    fresh.startedAt >= endedAt - 50,
    `the new run (${fresh.startedAt}) started after the stream ended (${endedAt})`,
  );
  assert.ok(!pidAlive(old.pid));
  assert.match(
    s.launcher.stderr,
    /engine streamer \(pid \d+\) drained in [\d.]+ s: \d+ requests? finished, 0 cut/,
  );
  const drain = (await journal(s.root)).find((e) => e.event === "drain");
  assert.equal(drain?.reason, "drained");
  assert.equal(drain?.drain?.cut, 0);
  assert.ok((drain?.drain?.finished ?? 0) >= 1, JSON.stringify(drain));
});

Deno.test("drain: a stream longer than --drain-timeout is cut at the deadline and counted", async () => {
  await using cat = await catalogue(card("streamer", 200)); // 6 s
  await using s = await launch(["streamer"], {
    catalogue: cat.path,
    args: ["--drain-timeout", "1"],
  });
  await s.launcher.ready();
  await ready(s, "streamer");
  const flow = chatStream(s.port + 1);
  await waitFor(() => flow.tokens >= 1, "the stream under way");
  await cat.write(card("streamer", 200).replace("4096", "8192"));
  await hup(s);
  const { text } = await flow.done;
  assert.ok(!whole(text), "the stream was cut");
  // The launcher's own count says it waited the deadline, no less.
  assert.match(
    s.launcher.stderr,
    /engine streamer \(pid \d+\) drain deadline passed after 1(\.\d)? s: \d+ requests? finished, 1 cut/,
  );
  const drain = (await journal(s.root)).find((e) => e.event === "drain");
  assert.equal(drain?.reason, "deadline");
  assert.equal(drain?.drain?.cut, 1);
  const file = `${s.root}/metrics/mymodel_serve_${s.port}.prom`;
  await waitFor(
    async () =>
      (await Deno.readTextFile(file)).includes(
        'mymodel_engine_requests_cut_total{model="streamer"} 1',
      ),
    "the cut counted in the metrics file",
  );
});

Deno.test("drain: a stop waits for a stream, exits 0 and leaves nothing running (vLLM's own --shutdown-timeout passed through)", async () => {
  // vLLM's own wait after SIGTERM (PR #36666): the card keeps it, and SIGTERM is the drain.
  await using cat = await catalogue(
    card("streamer", 100, ", shutdown-timeout: 5"),
  );
  await using s = await launch(["streamer"], { catalogue: cat.path });
  await s.launcher.ready();
  await ready(s, "streamer");
  const rec = (await readRecord(s.records, s.port + 1))!;
  assert.equal(rec.argv[rec.argv.indexOf("--shutdown-timeout") + 1], "5");
  const flow = chatStream(s.port + 1);
  await waitFor(() => flow.tokens >= 2, "the stream under way");
  s.launcher.child.kill("SIGTERM");
  const status = await s.launcher.exited();
  const { text } = await flow.done;
  assert.equal(status.code, 0);
  assert.ok(whole(text), "the stream finished whole");
  assert.match(
    s.launcher.stderr,
    /stopping: draining 1 engine \(up to 30 s\); a second signal stops at once/,
  );
  assert.match(s.launcher.stderr, /engine streamer \(pid \d+\) drained in/);
  assert.ok(!pidAlive(rec.pid), "the engine is gone");
  const events = await journal(s.root);
  assert.ok(events.some((e) => e.from === "ready" && e.to === "draining"));
  assert.ok(events.some((e) => e.from === "draining" && e.to === "stopping"));
});

Deno.test("drain: engines drain at once: a stop takes the slowest drain, not the sum", async () => {
  await using cat = await catalogue(card("one", 100) + card("two", 120));
  await using s = await launch(["one", "two"], { catalogue: cat.path });
  await s.launcher.ready();
  await ready(s, "one");
  await ready(s, "two");
  const flows = [chatStream(s.port + 1), chatStream(s.port + 2)];
  await waitFor(() => flows.every((f) => f.tokens >= 1), "both streams");
  s.launcher.child.kill("SIGTERM");
  assert.equal((await s.launcher.exited()).code, 0);
  for (const flow of flows) assert.ok(whole((await flow.done).text));
  // At once, not in turn: both drains began before either ended.
  const states = (await journal(s.root)).filter((e) => e.event === "state")
    .map((e) => `${e.model}:${e.to}`);
  const firstOver = states.findIndex((t) => /:stopping$/.test(t));
  for (const name of ["one", "two"]) {
    const began = states.indexOf(`${name}:draining`);
    assert.ok(
      began >= 0 && began < firstOver,
      `${name} drained beside the other: ${states.join(", ")}`,
    );
  }
  assert.match(
    s.launcher.stderr,
    /stopping: draining 2 engines \(up to 30 s\)/,
  );
});

Deno.test("drain: a second SIGTERM during a stop's drain stops at once", async () => {
  await using cat = await catalogue(card("streamer", 300)); // 9 s
  await using s = await launch(["streamer"], { catalogue: cat.path });
  await s.launcher.ready();
  await ready(s, "streamer");
  const flow = chatStream(s.port + 1);
  await waitFor(() => flow.tokens >= 1, "the stream under way");
  s.launcher.child.kill("SIGTERM");
  await s.launcher.waitForLine(/stopping: draining 1 engine/);
  await new Promise((r) => setTimeout(r, 700)); // past the duplicate window
  s.launcher.child.kill("SIGTERM");
  const status = await s.launcher.exited();
  assert.equal(status.code, 0);
  // Did not wait out the stream (9 s): it was cut, in the launcher's words.
  assert.ok(!whole((await flow.done).text), "the stream was cut");
  assert.match(s.launcher.stderr, /second signal: drains cut short, SIGTERM/);
  const drain = (await journal(s.root)).find((e) => e.event === "drain");
  assert.equal(drain?.reason, "skipped");
  assert.equal(drain?.drain?.cut, 1);
});

Deno.test("drain: a crash mid-stream restarts without waiting; nothing drains", async () => {
  await using cat = await catalogue(
    card("streamer", 100, ", fake-crash-after-ms: 2500"),
  );
  await using s = await launch(["streamer"], { catalogue: cat.path });
  await s.launcher.ready();
  await ready(s, "streamer");
  const old = (await readRecord(s.records, s.port + 1))!;
  const flow = chatStream(s.port + 1);
  const { text } = await flow.done;
  assert.ok(!whole(text), "the crash cut the stream");
  await waitFor(
    async () => (await readRecord(s.records, s.port + 1))?.pid !== old.pid,
    "the restart",
  );
  const events = await journal(s.root);
  assert.ok(!events.some((e) => e.event === "drain" || e.to === "draining"));
  assert.ok(events.some((e) => e.to === "backoff"));
});

Deno.test("drain: an engine whose metrics cannot be read is not drained, in one line", async () => {
  await using s = await launch(["alpha"]); // the stand-in serves no /metrics
  await s.launcher.ready();
  await ready(s, "alpha");
  assert.equal((await s.launcher.stop()).code, 0);
  const lines = s.launcher.lines.filter((l) => /not drained/.test(l));
  assert.deepEqual(lines.length, 1, s.launcher.stderr);
  assert.match(
    lines[0]!,
    /engine alpha \(pid \d+\) not drained: its metrics could not be read/,
  );
});

Deno.test("drain: a command card drains with its metrics:, and says it cannot without", async () => {
  const command = (name: string, metrics: string) =>
    `  ${name}: { verb: chat, hub: org/${name}, engine: command, command: [vllm, serve, "{model}", --host, "{host}", --port, "{port}"], args: [--fake-metrics, vllm, --fake-tokens, "30", --fake-token-ms, "50"]${metrics} }\n`;
  await using cat = await catalogue(
    command("own", "") +
      command(
        "counted",
        ", metrics: { running: vllm:num_requests_running, waiting: vllm:num_requests_waiting, prompt_tokens: vllm:prompt_tokens_total, generated_tokens: vllm:generation_tokens_total }",
      ),
  );
  await using s = await launch(["own", "counted"], { catalogue: cat.path });
  await s.launcher.ready();
  await ready(s, "own");
  await ready(s, "counted");
  const flow = chatStream(s.port + 2);
  await waitFor(() => flow.tokens >= 1, "the stream under way");
  assert.equal((await s.launcher.stop()).code, 0);
  assert.ok(whole((await flow.done).text), "the stream finished whole");
  assert.match(
    s.launcher.stderr,
    /engine own \(pid \d+\) not drained: no traffic reading \(an engine: command card without metrics:\)/,
  );
  assert.match(s.launcher.stderr, /engine counted \(pid \d+\) drained in/);
  assert.match(s.launcher.stderr, /stopping: draining 1 engine \(/);
});

Deno.test("--drain-timeout -1 or abc is refused in one line, exit 2, nothing started", async () => {
  const root = await makeRoot();
  try {
    for (const value of ["-1", "abc"]) {
      await using launcher = new Launcher([
        "alpha",
        "--directory",
        root,
        "--drain-timeout",
        value,
      ]);
      const status = await launcher.exited();
      assert.equal(status.code, 2, launcher.stderr);
      const said = launcher.lines.filter((l) => l.trim() !== "");
      assert.equal(said.length, 1, launcher.stderr);
      assert.match(said[0]!, /--drain-timeout/);
    }
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("drain: after a reload rotates the engine key, a stop drains with the key the running engine holds", async () => {
  const secrets = await Deno.makeTempDir({ prefix: "serve-drain-key-" });
  try {
    await Deno.writeTextFile(`${secrets}/key`, "key-one", { mode: 0o600 });
    await using cat = await catalogue(card("streamer", 100));
    await using s = await launch(["streamer"], {
      catalogue: cat.path,
      env: { LOCAL_ENGINE_API_KEY_FILE: `${secrets}/key` },
    });
    await s.launcher.ready();
    await ready(s, "streamer");
    await Deno.writeTextFile(`${secrets}/key`, "key-two");
    assert.match(await hup(s), /engine API key reloaded/);
    const flow = chatStream(s.port + 1, "key-one"); // the engine's own key
    await waitFor(() => flow.tokens >= 2, "the stream under way");
    assert.equal((await s.launcher.stop()).code, 0);
    assert.ok(whole((await flow.done).text), "the stream finished whole");
    assert.match(
      s.launcher.stderr,
      /engine streamer \(pid \d+\) drained in [\d.]+ s: \d+ requests? finished, 0 cut/,
    );
  } finally {
    await Deno.remove(secrets, { recursive: true });
  }
});

Deno.test("drain: a stop drains an engine still shown sleeping that a request has just woken", async () => {
  await using cat = await catalogue(
    `  dozy: { verb: chat, hub: org/dozy, env: { VLLM_SERVER_DEV_MODE: '1' }, args: { fake-metrics: vllm, fake-tokens: 30, fake-token-ms: 100 } }\n`,
  );
  // Rounds far apart: the launcher's state lags the engine's.
  await using s = await launch(["dozy"], {
    catalogue: cat.path,
    args: ["--health-interval", "4"],
  });
  await s.launcher.ready();
  await ready(s, "dozy");
  await fetch(`http://127.0.0.1:${s.port + 1}/sleep?level=1`, {
    method: "POST",
  }).then((r) => r.body?.cancel());
  await waitFor(
    async () => (await models(s.port, true)).active.dozy?.state === "sleeping",
    "dozy sleeping",
    10_000,
  );
  const flow = chatStream(s.port + 1); // wakes it
  await waitFor(() => flow.tokens >= 1, "the stream under way");
  s.launcher.child.kill("SIGTERM");
  assert.equal((await s.launcher.exited()).code, 0);
  assert.ok(whole((await flow.done).text), "the stream finished whole");
  const events = await journal(s.root);
  assert.ok(
    events.some((e) => e.from === "sleeping" && e.to === "draining"),
    JSON.stringify(events.filter((e) => e.model === "dozy")),
  );
  assert.match(s.launcher.stderr, /engine dozy \(pid \d+\) drained in/);
});

Deno.test("drain: a stop during a reload's drain starts no replacement, and the reload says why", async () => {
  await using cat = await catalogue(card("streamer", 100)); // 3 s
  await using s = await launch(["streamer"], { catalogue: cat.path });
  await s.launcher.ready();
  await ready(s, "streamer");
  const flow = chatStream(s.port + 1);
  await waitFor(() => flow.tokens >= 2, "the stream under way");
  await cat.write(card("streamer", 100).replace("4096", "8192"));
  const reloaded = hup(s);
  await waitFor(
    async () =>
      (await models(s.port, true)).active.streamer?.state === "draining",
    "streamer draining",
  );
  s.launcher.child.kill("SIGTERM");
  assert.equal((await s.launcher.exited()).code, 0);
  assert.ok(whole((await flow.done).text), "the drain still ran its course");
  assert.match(
    await reloaded,
    /engine streamer could not start: the launcher is stopping/,
  );
  const starts = s.launcher.lines.filter((l) =>
    /engine streamer \(vllm\) started/.test(l)
  );
  assert.equal(starts.length, 1, s.launcher.stderr);
});

Deno.test("drain: a stop of an engine still starting says it is not drained", async () => {
  await using cat = await catalogue(
    card("slow", 100, ", fake-load-ms: 20000"),
  );
  await using s = await launch(["slow"], { catalogue: cat.path });
  await s.launcher.ready();
  await waitFor(
    async () => (await readRecord(s.records, s.port + 1)) !== undefined,
    "spawned",
  );
  assert.equal((await s.launcher.stop()).code, 0);
  const lines = s.launcher.lines.filter((l) => /drain/.test(l));
  assert.deepEqual(
    lines.map((l) => l.replace(/^.*engine slow \(pid \d+\) /, "")),
    ["not drained: still starting"],
    s.launcher.stderr,
  );
});

/** `moving` and `steady`, streams of 30 tokens each 400 ms apart (12 s); `moving`'s `max-model-len` is `len`. */
function pair(len: number, extra = ""): string {
  return card("moving", 400, extra).replace("4096", `${len}`) +
    card("steady", 400, extra);
}

/** Both engines streaming, `moving`'s card changed and reloaded: its drain under way, `steady` untouched. */
async function reloadDraining(
  s: Setup,
  cat: { write(text: string): Promise<void> },
  extra = "",
): Promise<{ flows: ChatStream[]; reloaded: Promise<string> }> {
  await s.launcher.ready();
  await ready(s, "moving");
  await ready(s, "steady");
  const flows = [chatStream(s.port + 1), chatStream(s.port + 2)];
  await waitFor(() => flows.every((f) => f.tokens >= 1), "both streams");
  await cat.write(pair(8192, extra));
  const reloaded = hup(s);
  await waitFor(
    async () =>
      (await models(s.port, true)).active.moving?.state === "draining",
    "moving draining",
  );
  return { flows, reloaded };
}

Deno.test("drain: a SIGTERM during a reload's drain drains every engine at once and ends within --drain-timeout + --grace", async () => {
  await using cat = await catalogue(pair(4096));
  // 6 s against 12 s streams: every drain runs to its deadline.
  await using s = await launch(["moving", "steady"], {
    catalogue: cat.path,
    args: ["--drain-timeout", "6", "--grace", "1"],
  });
  const { flows, reloaded } = await reloadDraining(s, cat);
  const term = Date.now();
  s.launcher.child.kill("SIGTERM");
  await s.launcher.waitForLine(/stopping: draining 2 engines/);
  const steady = (await models(s.port, true)).active.steady;
  assert.deepEqual(
    [steady?.state, steady?.healthy],
    ["draining", false],
    "steady drains from the stop's first moment",
  );
  assert.equal((await s.launcher.exited()).code, 0);
  const took = (Date.now() - term) / 1000;
  assert.ok(
    took < 6 + 1 + 2,
    `the stop took ${took} s; expected within --drain-timeout 6 + --grace 1 + 2 s`,
  );
  await Promise.all(flows.map((f) => f.done));
  assert.match(
    await reloaded,
    /\] reload: engine moving could not start: the launcher is stopping$/,
  );
  // Beside the reload's drain, not after it.
  const states = (await journal(s.root)).filter((e) => e.event === "state")
    .map((e) => `${e.model}:${e.from}>${e.to}`);
  assert.ok(
    states.indexOf("steady:ready>draining") <
      states.indexOf("moving:draining>stopping"),
    states.join(", "),
  );
});

Deno.test("drain: a second signal in a stop begun during a reload's drain cuts every drain; a third SIGKILLs engines that ignore SIGTERM", async () => {
  const ignore = ", fake-ignore-sigterm: true";
  await using cat = await catalogue(pair(4096, ignore));
  await using s = await launch(["moving", "steady"], {
    catalogue: cat.path,
    args: ["--drain-timeout", "20", "--grace", "20"],
  });
  const { flows, reloaded } = await reloadDraining(s, cat, ignore);
  const first = Date.now();
  s.launcher.child.kill("SIGTERM");
  await s.launcher.waitForLine(/stopping: draining 2 engines/);
  // Past the window in which a second signal is the first delivered twice (signals.ts).
  await new Promise((r) =>
    setTimeout(r, Math.max(0, first + 600 - Date.now()))
  );
  s.launcher.child.kill("SIGTERM");
  for (const name of ["moving", "steady"]) {
    await s.launcher.waitForLine(
      new RegExp(
        `engine ${name} \\(pid \\d+\\) drain cut short by a second signal`,
      ),
      5_000,
    );
  }
  const third = Date.now();
  s.launcher.child.kill("SIGTERM");
  assert.equal((await s.launcher.exited()).code, 0);
  const took = (Date.now() - third) / 1000;
  assert.ok(took < 5, `${took} s after the third signal; --grace is 20 s`);
  assert.match(s.launcher.stderr, /another signal: SIGKILL to every engine/);
  await Promise.all(flows.map((f) => f.done));
  await reloaded;
});

Deno.test("drain: an engine killed during a stop begun in a reload's drain is not started again", async () => {
  await using cat = await catalogue(pair(4096));
  await using s = await launch(["moving", "steady"], {
    catalogue: cat.path,
    args: ["--drain-timeout", "6", "--grace", "1"],
  });
  const { flows, reloaded } = await reloadDraining(s, cat);
  const steady = (await readRecord(s.records, s.port + 2))!;
  s.launcher.child.kill("SIGTERM");
  await s.launcher.waitForLine(/stopping: draining 2 engines/);
  Deno.kill(steady.pid, "SIGKILL");
  await s.launcher.waitForLine(
    /engine steady \(pid \d+\) exit: signal SIGKILL/,
  );
  assert.equal((await s.launcher.exited()).code, 0);
  await Promise.all(flows.map((f) => f.done));
  await reloaded;
  assert.doesNotMatch(s.launcher.stderr, /engine steady .*restart 1 in/);
  assert.equal((await readRecord(s.records, s.port + 2))?.pid, steady.pid);
  const starts = s.launcher.lines.filter((l) =>
    /engine steady \(vllm\) started/.test(l)
  );
  assert.equal(starts.length, 1, s.launcher.stderr);
});

Deno.test("drain: a stop during a reload's read of the engine's --help ends at once: the reload is refused, the read ended", async () => {
  await using cat = await catalogue(card("moving", 100));
  await using s = await launch(["moving"], {
    catalogue: cat.path,
    args: ["--grace", "1"],
  });
  await s.launcher.ready();
  await ready(s, "moving");
  // The stand-in's help answers never (a real `vllm serve --help=all` takes seconds).
  const asked = `${s.records}/help-asked`;
  const stub = await Deno.readTextFile(`${s.bin}/vllm`);
  await Deno.writeTextFile(
    `${s.bin}/vllm`,
    stub.replace(
      "#!/bin/sh\n",
      () =>
        `#!/bin/sh\ncase "$*" in *--help=all*) echo $$ > '${asked}'; exec sleep 600;; esac\n`,
    ),
  );
  await cat.write(card("moving", 100).replace("4096", "8192"));
  const reloaded = hup(s);
  let helper = 0;
  await waitFor(async () => {
    helper = Number(await Deno.readTextFile(asked).catch(() => "0"));
    return helper > 0;
  }, "the reload's --help read under way");
  const term = Date.now();
  s.launcher.child.kill("SIGTERM");
  assert.equal((await s.launcher.exited()).code, 0);
  const took = (Date.now() - term) / 1000;
  assert.ok(took < 1 + 4, `${took} s; --grace 1 (the read's own limit: 10 s)`);
  assert.match(await reloaded, /reload refused: the launcher is stopping/);
  assert.ok(!pidAlive(helper), "the help read is gone");
});
