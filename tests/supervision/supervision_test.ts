/**
 * Supervision through the real command line, over stand-in engines
 * (tests/fixtures/fake_engine.ts): restarts and their delays, the restart
 * policy, liveness, records and reaping, the watchdog, `?detail=1`.
 */
import assert from "node:assert/strict";
import {
  freePorts,
  launch,
  Launcher,
  listDir,
  makeRoot,
  models,
  pathWith,
  pidAlive,
  readJournal,
  readRecord,
  recordNames,
  siteArgs,
  waitFor,
} from "../support/helpers.ts";
import { parse } from "../support/prometheus.ts";
import { pidOf } from "../support/records.ts";

/** The ISO times of the engine log's `start:` lines and of its `exit:` lines. */
async function logTimes(
  file: string,
): Promise<{ starts: number[]; exits: number[]; text: string }> {
  const text = await Deno.readTextFile(file);
  const starts: number[] = [];
  const exits: number[] = [];
  for (const line of text.split("\n")) {
    const match = /^--- (\S+) (start|exit): /.exec(line);
    if (!match) continue;
    (match[2] === "start" ? starts : exits).push(Date.parse(match[1]!));
  }
  return { starts, exits, text };
}

Deno.test("a crashed engine is restarted 1 s later and healthy again", async () => {
  await using s = await launch(["crash1"]);
  await s.launcher.ready();
  const first = await pidOf(s.records, s.port + 1);
  await s.launcher.waitForLine(
    /engine crash1 \(pid \d+\) exit: code 3 after 1\.\d s; restart 1 in 1 s/,
  );
  const down = await models(s.port, true);
  assert.equal(down.active.crash1?.healthy, false, "down until the restart");
  assert.equal(down.active.crash1?.state, "backoff");
  assert.ok(down.active.crash1?.next_restart, "next_restart while in backoff");
  assert.equal(down.active.crash1?.last_exit?.code, 3);
  assert.ok(
    down.active.crash1!.next_restart! > down.active.crash1!.last_exit!.at,
    "the restart is due after the exit",
  );
  await waitFor(
    async () => {
      const body = await models(s.port, true);
      return body.active.crash1?.healthy === true &&
        body.active.crash1.restarts === 1;
    },
    "healthy again after one restart",
    5_000,
  );
  const second = await pidOf(s.records, s.port + 1);
  assert.notEqual(second, first, "a new process");
  // The delay is the launcher's own word ("restart 1 in 1 s" above; its
  // timer runs on EngineRun's clock): here, the order of exit and restart.
  const { starts, exits } = await logTimes(`${s.root}/logs/crash1.log`);
  assert.equal(starts.length, 2);
  assert.ok(exits[0]! <= starts[1]!, "restarted after the exit");
  const ready = (await models(s.port, true)).active.crash1!;
  assert.equal(ready.state, "ready");
  assert.equal(ready.pid, second);
  assert.equal(ready.next_restart, null);
  // From the exit to the next 200: its 1 s backoff and the new run's start.
  const recovery = ready.last_recovery!;
  assert.equal(recovery.cause, "exit");
  assert.ok(
    recovery.seconds >= 1 && recovery.seconds < 5,
    `${recovery.seconds}`,
  );
  const start = ready.last_start!;
  assert.ok(start.seconds < recovery.seconds - 0.9, JSON.stringify(start));
  assert.deepEqual(
    Object.keys(start.phases),
    ["spawn"],
    "no gate, no phase lines",
  );
  await waitFor(async () => {
    const text = await Deno.readTextFile(
      `${s.root}/metrics/mymodel_serve_${s.port}.prom`,
    );
    const samples = parse(text).get("mymodel_engine_recovery_seconds")?.metrics;
    return samples?.[0]?.value === String(recovery.seconds);
  }, "the recovery in the metrics file");
});

Deno.test("a crash loop backs off 1, 2, 4 s, and SIGTERM during the 4 s wait exits at once", async () => {
  await using s = await launch(["crashloop"]);
  await s.launcher.ready();
  await s.launcher.waitForLine(/engine crashloop .* restart 3 in 4 s/, 20_000);
  // The delays as the launcher states them, in order: 1, 2, 4 s.
  const delays = s.launcher.lines.flatMap((line) =>
    /engine crashloop .* restart (\d+) in (\d+) s/.exec(line)?.slice(1) ?? []
  );
  assert.deepEqual(delays, ["1", "1", "2", "2", "3", "4"]);
  const { starts, exits } = await logTimes(`${s.root}/logs/crashloop.log`);
  assert.equal(starts.length, 3);
  for (const n of [1, 2]) assert.ok(exits[n - 1]! <= starts[n]!);
  const body = await models(s.port, true);
  assert.equal(body.active.crashloop?.state, "backoff");
  assert.equal(body.active.crashloop?.restarts, 2);
  const next = body.active.crashloop!.next_restart!;
  const status = await s.launcher.stop("SIGTERM");
  assert.equal(status.code, 0);
  // At once: the journal's backoff → exited came before the restart was due,
  // and no third restart began.
  const events = await readJournal(s.root);
  const exited = events.find((e) =>
    e.model === "crashloop" && e.event === "state" && e.to === "exited"
  );
  assert.ok(exited, JSON.stringify(events));
  assert.equal(exited.from, "backoff");
  assert.ok(String(exited.at) < next, `${exited.at} before ${next}`);
  assert.equal(
    (await logTimes(`${s.root}/logs/crashloop.log`)).starts.length,
    3,
  );
});

for (
  const [how, model, args] of [
    ["--restart never", "crash1", ["--restart", "never"]],
    ["the card's restart: never", "crashnever", []],
  ] as const
) {
  Deno.test(`${how}: a crashed engine stays down and is reported exited`, async () => {
    await using s = await launch([model], { args: [...args] });
    await s.launcher.ready();
    await s.launcher.waitForLine(
      new RegExp(`engine ${model} .* exit: code 3 .*not restarted`),
    );
    // exited is where it stays (a restart would go through backoff first).
    let entry = (await models(s.port, true)).active[model]!;
    await waitFor(async () => {
      entry = (await models(s.port, true)).active[model]!;
      return entry.state !== "stopping" && entry.state !== "starting";
    }, "the exit handled");
    assert.equal(entry.state, "exited");
    assert.equal(entry.restarts, 0);
    assert.equal(entry.pid, null);
    assert.equal(entry.last_exit?.code, 3);
    assert.equal(entry.healthy, false);
    assert.deepEqual(recordNames(s.root), [], "no record of a dead run");
  });
}

Deno.test("on-failure leaves an engine that exited 0 alone; always restarts it", async () => {
  await using s = await launch(["exit0", "crashnever"], {
    args: ["--restart", "always"],
  });
  await s.launcher.ready();
  await s.launcher.waitForLine(/engine exit0 .* exit: code 0 .* restart 1/);
  // The card's own `restart: never` wins over the flag.
  await s.launcher.waitForLine(/engine crashnever .* not restarted/);
  await using t = await launch(["exit0"]);
  await t.launcher.ready();
  await t.launcher.waitForLine(
    /engine exit0 .* exit: code 0 .* not restarted \(restart: on-failure\)/,
  );
});

Deno.test("GET /models without detail keeps exactly the specified shape", async () => {
  await using s = await launch(["alpha"]);
  await s.launcher.ready();
  const body = await models(s.port);
  assert.deepEqual(Object.keys(body), ["active", "catalogue"]);
  assert.deepEqual(Object.keys(body.active.alpha!).sort(), [
    "healthy",
    "url",
    "verb",
  ]);
  const detail = (await models(s.port, true)).active.alpha!;
  // canary and traffic: issue 36.
  assert.deepEqual(Object.keys(detail).sort(), [
    "canary",
    "drain",
    "footprint",
    "gpu_memory_by",
    "gpu_memory_mib",
    "gpus",
    "healthy",
    "last_exit",
    "last_recovery",
    "last_start",
    "next_restart",
    "phase",
    "phase_since",
    "pid",
    "progress",
    "restarts",
    "since",
    "sleep",
    "state",
    "traffic",
    "url",
    "verb",
    "waiting_for",
  ]);
});

Deno.test("?detail=1 reports starting, ready, unhealthy and stopping", async () => {
  const began = Date.now();
  await using s = await launch(["slow", "hangafter", "stubborn"], {
    args: [
      "--liveness-failures",
      "0",
      "--health-interval",
      "0.2",
      "--grace",
      "3",
    ],
  });
  await s.launcher.ready();
  const early = await models(s.port, true);
  assert.equal(early.active.slow?.state, "starting");
  assert.equal(typeof early.active.slow?.pid, "number");
  await waitFor(async () => {
    const body = await models(s.port, true);
    return body.active.slow?.state === "ready" &&
      body.active.stubborn?.state === "ready";
  }, "ready");
  await waitFor(
    async () =>
      (await models(s.port, true)).active.hangafter?.state === "unhealthy",
    "unhealthy after it stops answering",
  );
  const since = Date.parse(
    (await models(s.port, true)).active.hangafter!.since!,
  );
  // The time of this run's change: after the launch, not in the future.
  assert.ok(began <= since && since <= Date.now(), `${since}`);
  s.launcher.child.kill("SIGTERM");
  await s.launcher.waitForLine(/shutting down/);
  const stopping = await models(s.port, true);
  assert.equal(stopping.active.stubborn?.state, "stopping");
  assert.equal((await s.launcher.exited()).code, 0);
});

Deno.test("an engine that answered 200 and then hangs is restarted after --liveness-failures polls; a loading one is left alone", async () => {
  await using s = await launch(["hangafter", "loading"], {
    args: [
      "--health-interval",
      "0.3",
      "--liveness-failures",
      "2",
      "--grace",
      "1",
    ],
  });
  await s.launcher.ready();
  const hung = await pidOf(s.records, s.port + 1);
  const loading = await pidOf(s.records, s.port + 2);
  const line = await s.launcher.waitForLine(
    /engine hangafter .* failed 2 health polls in a row after answering 200/,
    20_000,
  );
  assert.ok(line);
  await s.launcher.waitForLine(
    /engine hangafter .* exit: unhealthy, then .* restart 1 in 1 s/,
  );
  await waitFor(async () => {
    const entry = (await models(s.port, true)).active.hangafter!;
    // The new process writes its own record once Deno has booted it.
    const record = await readRecord(s.records, s.port + 1);
    return entry.restarts === 1 && entry.state !== "backoff" &&
      record !== undefined && record.pid !== hung;
  }, "restarted");
  const entry = (await models(s.port, true)).active.hangafter!;
  assert.equal(entry.last_exit?.reason, "unhealthy");
  assert.notEqual(await pidOf(s.records, s.port + 1), hung);
  assert.ok(!pidAlive(hung), "the hung process is gone");
  const still = (await models(s.port, true)).active.loading!;
  assert.equal(still.state, "starting");
  assert.equal(still.restarts, 0);
  assert.equal(still.pid, loading, "a loading engine is never killed");
});

Deno.test("a second launcher for a model already served from the directory exits 1 naming the first launcher", async () => {
  await using s = await launch(["alpha"]);
  await s.launcher.ready();
  await pidOf(s.records, s.port + 1);
  const other = new Launcher(
    ["alpha", ...siteArgs(freePorts(1), s.root)],
    { PATH: pathWith(s.bin), NUCLEUS_MODE: "dev" },
  );
  const status = await other.exited();
  assert.equal(status.code, 1);
  const errors = other.lines.filter((l) => l.includes("error"));
  assert.equal(errors.length, 1, other.stderr);
  assert.match(
    errors[0]!,
    new RegExp(
      `Cannot start alpha: launcher pid ${s.launcher.child.pid} already serves it`,
    ),
  );
  assert.doesNotMatch(other.stderr, /engine alpha .* started/);
});

Deno.test("a stale record whose pid now belongs to an unrelated process does not get it killed", async () => {
  const root = await makeRoot();
  const bystander = new Deno.Command("sleep", {
    args: ["30"],
    stdin: "null",
    stdout: "null",
    stderr: "null",
    detached: true, // its own group, as an engine's would be
  }).spawn();
  try {
    // Written by a launcher that is gone (pid 999999999 cannot exist), naming
    // the bystander's pid with another start time: a reused pid.
    await Deno.writeTextFile(
      `${root}/data/alpha.engine.json`,
      JSON.stringify({
        model: "alpha",
        pid: bystander.pid,
        startTime: "1",
        command: "vllm serve org/alpha",
        host: "127.0.0.1",
        port: 1,
        launcherPid: 999_999_999,
        launcherStartTime: "1",
      }),
    );
    await using s = await launch(["alpha"], { root });
    await s.launcher.ready();
    // The stale record is judged before the engine starts; its own record,
    // written once it has spawned, says that is over.
    await waitFor(async () => {
      const text = await Deno.readTextFile(`${root}/data/alpha.engine.json`)
        .catch(() => "{}");
      return JSON.parse(text).launcherPid === s.launcher.child.pid;
    }, "the new run's record");
    assert.ok(pidAlive(bystander.pid), "the unrelated process lives");
    assert.doesNotMatch(s.launcher.stderr, /outlived its launcher/);
    const names = recordNames(root);
    assert.deepEqual(names, ["alpha.engine.json"], "only the new record");
    const record = JSON.parse(
      await Deno.readTextFile(`${root}/data/alpha.engine.json`),
    );
    assert.equal(record.launcherPid, s.launcher.child.pid);
  } finally {
    bystander.kill("SIGKILL");
    await bystander.status;
  }
});

Deno.test("records name the engine, its start time and the launcher while it runs, and go with it", async () => {
  await using s = await launch(["alpha"]);
  await s.launcher.ready();
  const pid = await pidOf(s.records, s.port + 1);
  const record = JSON.parse(
    await Deno.readTextFile(`${s.root}/data/alpha.engine.json`),
  );
  assert.equal(record.pid, pid);
  assert.equal(record.port, s.port + 1);
  assert.equal(record.launcherPid, s.launcher.child.pid);
  const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
  assert.equal(
    record.startTime,
    stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19],
  );
  assert.match(record.command, /^vllm serve org\/alpha /);
  await s.launcher.stop();
  assert.deepEqual(recordNames(s.root), []);
});

Deno.test("engine logs rotate at --log-max-bytes keeping --log-keep files, and a flooding engine is drained in full", async () => {
  await using s = await launch(["flood"], {
    args: ["--log-max-bytes", "4000000", "--log-keep", "2"],
  });
  await s.launcher.ready();
  await waitFor(
    async () => {
      // Rotation renames the file, then opens a new one: between the two it is absent.
      const text = await Deno.readTextFile(`${s.root}/logs/flood.log`).catch(
        (error) => {
          if (error instanceof Deno.errors.NotFound) return "";
          throw error;
        },
      );
      return /flood done in \d+ ms/.test(text);
    },
    "the flood written",
    30_000,
  );
  await s.launcher.stop();
  // The journal (events.jsonl) lives beside the engine logs.
  const names = listDir(`${s.root}/logs`).filter((n) => n.startsWith("flood"));
  assert.deepEqual(names, ["flood.log", "flood.log.1", "flood.log.2"]);
  for (const name of ["flood.log.1", "flood.log.2"]) {
    const size = (await Deno.stat(`${s.root}/logs/${name}`)).size;
    assert.ok(
      size >= 4_000_000 && size < 4_000_000 + 1_048_576,
      `${name}: ${size} bytes`,
    );
  }
  const current = await Deno.readTextFile(`${s.root}/logs/flood.log`);
  assert.match(current, /--- .* exit: /, "the exit line in the current file");
  assert.doesNotMatch(current, /bytes of engine output were lost/);
});

Deno.test("a port taken when the delay ends is logged, and the restart waits for the next step", async () => {
  await using s = await launch(["crash1"]);
  await s.launcher.ready();
  await s.launcher.waitForLine(/engine crash1 .* restart 1 in 1 s/);
  // Someone else takes the engine's port during the delay.
  const squatter = Deno.listen({ hostname: "127.0.0.1", port: s.port + 1 });
  try {
    await s.launcher.waitForLine(
      new RegExp(
        `engine crash1 .* cannot restart: port ${
          s.port + 1
        } is taken by another process; restart 1 in 2 s`,
      ),
    );
    assert.equal((await models(s.port, true)).active.crash1?.state, "backoff");
  } finally {
    squatter.close();
  }
  await waitFor(
    async () => (await models(s.port, true)).active.crash1?.restarts === 1,
    "restarted once the port was free",
  );
});

Deno.test("an engine that cannot be prepared at restart time is retried at the next step, not counted as a restart", async () => {
  await using s = await launch(["crash1"]);
  await s.launcher.ready();
  await s.launcher.waitForLine(/engine crash1 .* restart 1 in 1 s/);
  // The engine's executable disappears (an upgrade in progress, say).
  const script = await Deno.readTextFile(`${s.bin}/vllm`);
  await Deno.remove(`${s.bin}/vllm`);
  try {
    await s.launcher.waitForLine(
      /engine crash1 .* cannot restart: Cannot prepare crash1: the vllm engine's executable 'vllm' is not on PATH .*; restart 1 in 2 s/,
    );
    const entry = (await models(s.port, true)).active.crash1!;
    assert.equal(entry.restarts, 0);
    assert.equal(entry.state, "backoff");
  } finally {
    await Deno.writeTextFile(`${s.bin}/vllm`, script, { mode: 0o755 });
  }
  await waitFor(
    async () => (await models(s.port, true)).active.crash1?.restarts === 1,
    "restarted once the executable is back",
  );
});
