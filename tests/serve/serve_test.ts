/**
 * The launcher through its real command line, in a subprocess, over stand-in
 * engines (tests/fixtures/fake_engine.ts) found on PATH as `vllm`.
 */
import assert from "node:assert/strict";
import {
  fakeBin,
  freePorts,
  getJson,
  launch,
  Launcher,
  listDir,
  listening,
  makeRoot,
  models,
  pathWith,
  pidAlive,
  readRecord,
  STAND_IN_CATALOGUE,
  waitFor,
  withinGuard,
} from "../support/helpers.ts";

const CATALOGUE = STAND_IN_CATALOGUE;

Deno.test("engines listen on --port + n in request order and /models reports them", async () => {
  await using s = await launch(["beta", "alpha"]);
  await s.launcher.ready();
  const beta = await readRecordSoon(s.records, s.port + 1);
  const alpha = await readRecordSoon(s.records, s.port + 2);
  assert.deepEqual(beta.argv, [
    "serve",
    "org/beta",
    "--host",
    "127.0.0.1",
    "--port",
    String(s.port + 1),
    "--served-model-name",
    "beta",
  ]);
  assert.deepEqual(alpha.argv.slice(-2), ["--max-model-len", "4096"]);
  await waitFor(async () => {
    const body = await models(s.port);
    return Object.values(body.active).every((m) => m.healthy);
  }, "both engines healthy");
  const body = await models(s.port);
  assert.deepEqual(Object.keys(body.active), ["beta", "alpha"]);
  assert.deepEqual(body.active.beta, {
    verb: "embed",
    url: `http://127.0.0.1:${s.port + 1}/v1`,
    healthy: true,
  });
  assert.equal(body.active.alpha?.url, `http://127.0.0.1:${s.port + 2}/v1`);
  assert.deepEqual(body.catalogue, [...body.catalogue].sort());
  assert.ok(body.catalogue.includes("hung"));
  const health = await getJson(`http://127.0.0.1:${s.port}/health`);
  assert.deepEqual(health.body, { status: "ok", models: 2 });
});

async function readRecordSoon(dir: string, port: number) {
  let record: Awaited<ReturnType<typeof readRecord>>;
  await waitFor(
    async () => (record = await readRecord(dir, port)) !== undefined,
    `engine on ${port}`,
  );
  return record!;
}

Deno.test("a VERB: spec starts the same card, reported under its catalogue name", async () => {
  await using s = await launch(["EMBED:beta", "CHAT:alpha"]);
  await s.launcher.ready();
  const record = await readRecordSoon(s.records, s.port + 1);
  assert.equal(
    record.argv[record.argv.indexOf("--served-model-name") + 1],
    "beta",
  );
  const body = await models(s.port);
  assert.deepEqual(Object.keys(body.active), ["beta", "alpha"]);
});

Deno.test("command-line flags win over the environment they mirror", async () => {
  const envPort = freePorts(1);
  await using s = await launch(["alpha"], {
    env: { NUCLEUS_PORT: String(envPort), NUCLEUS_HOST: "0.0.0.0" },
  });
  await s.launcher.ready();
  assert.ok(await listening(s.port), "listens on --port");
  assert.ok(!(await listening(envPort)), "not on NUCLEUS_PORT");
  const record = await readRecordSoon(s.records, s.port + 1);
  assert.equal(record.argv[record.argv.indexOf("--host") + 1], "127.0.0.1");
});

Deno.test("the environment applies when no flag is given", async () => {
  const root = await makeRoot();
  const bin = await fakeBin();
  const records = await Deno.makeTempDir();
  const port = freePorts(1);
  await using launcher = new Launcher(["alpha", "--catalogue", CATALOGUE], {
    PATH: pathWith(bin),
    FAKE_ENGINE_RECORD_DIR: records,
    MY_LOCAL: root,
    NUCLEUS_PORT: String(port),
    NUCLEUS_HOST: "127.0.0.1",
    NUCLEUS_MODE: "development",
  });
  await launcher.ready();
  assert.match(launcher.stderr, /mode: development/);
  await readRecordSoon(records, port + 1);
  assert.equal(
    (await models(port)).active.alpha?.url,
    `http://127.0.0.1:${port + 1}/v1`,
  );
  await launcher.stop();
  for (const dir of [root, bin, records]) {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the engine inherits the environment plus the card's env, and its output goes to its log", async () => {
  await using s = await launch(["envy"], {
    env: {
      FAKE_MARK: "inherited",
      LOCAL_ENGINE_API_KEY: "sekret-key-123",
      IDP_SECRET: "the-launcher's-own-secret",
    },
  });
  await s.launcher.ready();
  const record = await readRecordSoon(s.records, s.port + 1);
  assert.deepEqual(record.env, {
    FAKE_MARK: "inherited",
    CARD_ENV: "from-card",
  });
  const i = record.argv.indexOf("--api-key");
  assert.equal(record.argv[i + 1], "sekret-key-123");
  assert.equal(
    record.argv[i - 1],
    "envy",
    "--api-key comes after the name, before the args",
  );
  const log = `${s.root}/logs/envy.log`;
  await waitFor(
    async () => /stderr: hello/.test(await Deno.readTextFile(log)),
    "engine output in log",
  );
  await s.launcher.stop();
  const text = await Deno.readTextFile(log);
  const header = text.split("\n")[0]!;
  assert.match(
    header,
    /^--- \d{4}-\d\d-\d\dT.* start: vllm serve org\/envy .*--api-key \*\*\*/,
  );
  assert.ok(
    !text.includes("sekret-key-123"),
    "the API key never reaches the log",
  );
  assert.match(text, /stdout: hello/);
  assert.match(text, /--- .* exit: /);
});

Deno.test("local weights under <directory>/models are passed as an absolute path", async () => {
  const root = await makeRoot();
  await Deno.mkdir(`${root}/models/weights-dir`);
  await using s = await launch(["weights"], { root });
  await s.launcher.ready();
  const record = await readRecordSoon(s.records, s.port + 1);
  assert.equal(
    record.argv[1],
    await Deno.realPath(`${root}/models/weights-dir`),
  );
});

Deno.test("/models reports a loading engine as not healthy, then healthy, then not when it dies", async () => {
  await using s = await launch(["slow", "late", "crashy"]);
  await s.launcher.ready();
  const first = await models(s.port);
  assert.equal(first.active.slow?.healthy, false, "503 while loading");
  assert.equal(first.active.late?.healthy, false, "refused while loading");
  await waitFor(async () => {
    const body = await models(s.port);
    return !!body.active.slow?.healthy && !!body.active.late?.healthy &&
      !!body.active.crashy?.healthy;
  }, "all healthy");
  await s.launcher.waitForLine(
    /engine crashy .* exit: code 3/,
  );
  const after = await models(s.port);
  assert.equal(after.active.crashy?.healthy, false);
  assert.equal(after.active.slow?.healthy, true);
});

Deno.test("a hung engine does not stall /models", async () => {
  await using s = await launch(["hung", "alpha"]);
  await s.launcher.ready();
  await waitFor(
    async () => (await models(s.port)).active.alpha?.healthy === true,
    "alpha healthy",
  );
  // Answered once the hung engine's poll times out (2 s): the guard fails a hang only.
  const body = await withinGuard(models(s.port), "/models with a hung engine");
  assert.equal(body.active.hung?.healthy, false);
  assert.equal(body.active.alpha?.healthy, true);
});

Deno.test("SIGTERM stops every engine and every engine's child, then exits 0", async () => {
  await using s = await launch(["forker", "alpha"]);
  await s.launcher.ready();
  const forker = await readRecordSoon(s.records, s.port + 1);
  const alpha = await readRecordSoon(s.records, s.port + 2);
  assert.ok(forker.childPid && pidAlive(forker.childPid));
  const status = await s.launcher.stop("SIGTERM");
  assert.equal(status.code, 0);
  for (const pid of [forker.pid, forker.childPid!, alpha.pid]) {
    await waitFor(() => !pidAlive(pid), `pid ${pid} gone`, 3_000);
  }
  assert.ok(!(await listening(s.port)));
  assert.ok(!(await listening(s.port + 1)));
});

Deno.test("SIGINT stops the launcher the same way", async () => {
  await using s = await launch(["alpha"]);
  await s.launcher.ready();
  const alpha = await readRecordSoon(s.records, s.port + 1);
  assert.equal((await s.launcher.stop("SIGINT")).code, 0);
  await waitFor(() => !pidAlive(alpha.pid), "engine gone", 3_000);
});

Deno.test("an engine that ignores SIGTERM is SIGKILLed after the grace period, its child too", async () => {
  await using s = await launch(["stubborn"], { args: ["--grace", "1"] });
  await s.launcher.ready();
  const rec = await readRecordSoon(s.records, s.port + 1);
  assert.equal((await s.launcher.stop()).code, 0);
  // The launcher's own line says it waited the grace period out.
  assert.match(s.launcher.stderr, /outlived 1000 ms after SIGTERM: SIGKILL/);
  for (const pid of [rec.pid, rec.childPid!]) {
    await waitFor(() => !pidAlive(pid), `pid ${pid} gone`, 3_000);
  }
});

Deno.test("a second signal during shutdown skips the grace period; a relayed duplicate does not", async () => {
  await using s = await launch(["stubborn"]); // default grace: 10 s
  await s.launcher.ready();
  const rec = await readRecordSoon(s.records, s.port + 1);
  s.launcher.child.kill("SIGTERM");
  s.launcher.child.kill("SIGTERM"); // the same signal twice at once, as a wrapper relays it
  await new Promise((r) => setTimeout(r, 1_000));
  assert.equal(s.launcher.status, undefined, "still in its grace period");
  assert.doesNotMatch(s.launcher.stderr, /second signal/);
  s.launcher.child.kill("SIGINT");
  const status = await s.launcher.exited();
  assert.equal(status.code, 0);
  // Not the 10 s grace: the second signal's SIGKILL, in the launcher's words.
  assert.match(s.launcher.stderr, /second signal: SIGKILL/);
  assert.doesNotMatch(s.launcher.stderr, /outlived \d+ ms after SIGTERM/);
  await waitFor(
    () => !pidAlive(rec.pid) && !pidAlive(rec.childPid!),
    "engine and child gone",
    3_000,
  );
});

Deno.test("children left by an engine that crashed are cleaned up at once", async () => {
  await using s = await launch(["orphaner"]);
  await s.launcher.ready();
  const rec = await readRecordSoon(s.records, s.port + 1);
  await s.launcher.waitForLine(/engine orphaner .* exit: code 3/);
  await waitFor(() => !pidAlive(rec.childPid!), "orphaned child gone", 8_000);
  assert.equal(s.launcher.status, undefined, "the launcher keeps running");
});

for (const how of ["throw", "exit"]) {
  Deno.test(`an embedding program that ends by ${how === "throw" ? "an uncaught error" : "Deno.exit"} takes its engines with it`, async () => {
    const root = await makeRoot();
    const bin = await fakeBin();
    const records = await Deno.makeTempDir();
    const port = freePorts(1);
    const fixture =
      new URL("../fixtures/crashing_embedder.ts", import.meta.url).pathname;
    const { stdout } = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        "--quiet",
        fixture,
        how,
        root,
        String(port),
        CATALOGUE,
      ],
      env: { PATH: pathWith(bin), FAKE_ENGINE_RECORD_DIR: records },
      stdin: "null",
      stdout: "piped",
      stderr: "null",
    }).output();
    const pid = Number(/pid (\d+)/.exec(new TextDecoder().decode(stdout))?.[1]);
    assert.ok(pid > 0);
    const rec = await readRecordSoon(records, port);
    await waitFor(
      () => !pidAlive(pid) && !pidAlive(rec.childPid!),
      "engine and its child gone",
      3_000,
    );
    for (const dir of [root, bin, records]) {
      await Deno.remove(dir, { recursive: true });
    }
  });
}

// ---- start-up errors: one line, the right exit code, nothing listening, no engine started

async function failsToStart(
  models: string[],
  options: {
    args?: string[];
    env?: Record<string, string>;
    root?: string;
    code?: number;
  },
  message: RegExp,
): Promise<void> {
  await using s = await launch(models, options);
  const status = await s.launcher.exited();
  assert.equal(status.code, options.code ?? 1, s.launcher.stderr);
  const lines = s.launcher.lines.filter((l) => l.trim() !== "");
  assert.equal(lines.length, 1, `one line, got:\n${s.launcher.stderr}`);
  assert.match(lines[0]!, message);
  assert.deepEqual(listDir(s.records), [], "no engine started");
  for (let p = s.port; p <= s.port + models.length; p++) {
    assert.ok(!(await listening(p)), `nothing listens on ${p}`);
  }
}

Deno.test("a root directory missing subdirectories is an AssertionError naming them", async () => {
  const root = await makeRoot(["models", "data"]);
  await failsToStart(
    ["alpha"],
    { root },
    /missing logs, metrics .*mkdir -p .*\/logs/,
  );
});

Deno.test("an unknown model is a KeyError listing close matches", async () => {
  await failsToStart(["alpah"], {}, /Unknown model 'alpah'.*alpha/);
});

Deno.test("a model requested twice is refused", async () => {
  await failsToStart(["alpha", "CHAT:alpha"], {}, /'alpha' is requested twice/);
});

Deno.test("a catalogue with a syntax error is refused naming the file and line", async () => {
  const bad = await Deno.makeTempFile({ suffix: ".yaml" });
  await Deno.writeTextFile(bad, "models:\n  alpha: { verb: chat\n");
  await failsToStart(
    ["alpha"],
    { args: ["--catalogue", bad] },
    new RegExp(`${bad}.*line`),
  );
  await Deno.remove(bad);
});

Deno.test("a port already in use is refused before any engine starts", async () => {
  const port = freePorts(2);
  using _busy = Deno.listen({ hostname: "127.0.0.1", port: port + 2 });
  await using s = await launch(["alpha", "beta"], { port });
  assert.equal((await s.launcher.exited()).code, 1);
  assert.match(
    s.launcher.stderr,
    new RegExp(`port ${port + 2} .*beta.*already in use`),
  );
  assert.deepEqual(listDir(s.records), []);
  assert.ok(!(await listening(port)) && !(await listening(port + 1)));
});

Deno.test("a missing engine executable is refused naming the engine and how to install it", async () => {
  await failsToStart(
    ["alpha"],
    { env: { PATH: "/nonexistent" } },
    /vllm engine's executable 'vllm' is not on PATH \(pip install vllm/,
  );
});

Deno.test("a card whose local weights are missing and has no hub is refused", async () => {
  await failsToStart(["nowhere"], {}, /no weights at .*models\/not-there/);
});

Deno.test("a llama.cpp card whose directory holds no .gguf file is refused", async () => {
  const root = await makeRoot();
  await Deno.mkdir(`${root}/models/gguf-dir`);
  await failsToStart(["gguf"], { root }, /holds no \.gguf file/);
});

Deno.test("MY_LOCAL naming a missing directory, without --directory, is refused", async () => {
  // With --directory the variable is not read (operator_mistakes_test.ts).
  const bin = await fakeBin();
  await using launcher = new Launcher(["alpha", "--catalogue", CATALOGUE], {
    PATH: pathWith(bin),
    MY_LOCAL: "/nonexistent/root",
  });
  assert.equal((await launcher.exited()).code, 1);
  assert.deepEqual(launcher.lines.filter((l) => l.trim()), [
    "[serve] error: Cannot use MY_LOCAL=/nonexistent/root: no such directory (expected an existing directory)",
  ]);
  await Deno.remove(bin, { recursive: true });
});

Deno.test("no root directory at all is refused", async () => {
  const bin = await fakeBin();
  await using launcher = new Launcher(["alpha", "--catalogue", CATALOGUE], {
    PATH: pathWith(bin),
  });
  assert.equal((await launcher.exited()).code, 1);
  assert.match(launcher.stderr, /set MY_LOCAL or pass --directory/);
  await Deno.remove(bin, { recursive: true });
});

Deno.test("production mode without IDP_SECRET is refused before anything starts", async () => {
  await failsToStart(
    ["alpha"],
    { env: { NUCLEUS_MODE: "production", IDP_SECRET: "", IDP_ISSUER: "" } },
    /production mode: IDP_SECRET and IDP_ISSUER must be set/,
  );
});

for (
  const [args, message] of [
    [["--bogus"], /Unknown option '--bogus'/],
    [
      ["alpha", "--prot", "5000"],
      /Unknown option '--prot'; did you mean --port\? \(see --help\)$/,
    ],
    [[], /no model given/],
    [["alpha", "--port", "50x0"], /--port="50x0": expected an integer/],
    [
      ["alpha", "--port", "70000"],
      /--port=70000: expected a port from 1 to 65535/,
    ],
    [["alpha", "beta", "--port", "65534"], /engine ports would pass 65535/],
    [["alpha", "--dev_mode=maybe"], /--dev_mode=maybe/],
  ] as const
) {
  Deno.test(`usage error: ${args.join(" ") || "(no arguments)"} exits 2 with one line`, async () => {
    await using launcher = new Launcher([...args]);
    assert.equal((await launcher.exited()).code, 2);
    const lines = launcher.lines.filter((l) => l.trim() !== "");
    assert.equal(lines.length, 1, launcher.stderr);
    assert.match(lines[0]!, message);
  });
}

Deno.test("--help prints usage and exits 0", async () => {
  await using launcher = new Launcher(["--help"]);
  assert.equal((await launcher.exited()).code, 0);
  assert.match(
    launcher.stdout.join("\n"),
    /^Usage:\n {2}deno run -A jsr:@mymodel\/serve <model>/,
  );
});
