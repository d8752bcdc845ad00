/**
 * SIGHUP reloads through the real command line, over stand-in engines
 * (tests/fixtures/fake_engine.ts): what restarts, what does not, what is
 * refused, TLS pairs and secrets read again, coalesced and early SIGHUPs.
 */
import assert from "node:assert/strict";
import { SignJWT } from "jose";
import { makeMaterial } from "../support/certs.ts";
import { get, parse } from "../support/prometheus.ts";
import { Semioserve } from "../../mod.ts";
import {
  freePorts,
  inProcessSite,
  launch,
  type Launcher,
  makeRoot,
  models,
  pidAlive,
  readRecord,
  type Setup,
  STAND_IN_CATALOGUE,
  waitFor,
} from "../support/helpers.ts";

const TWO = `models:
  alpha: { verb: chat, hub: org/alpha, args: { max-model-len: 4096 } }
  beta: { verb: embed, hub: org/beta }
`;

/** A catalogue file in its own directory, rewritten by the test. */
async function catalogueFile(
  text: string,
): Promise<
  { path: string; write(text: string): Promise<void> } & AsyncDisposable
> {
  const dir = await Deno.makeTempDir({ prefix: "serve-cat-" });
  const path = `${dir}/catalogue.yaml`;
  await Deno.writeTextFile(path, text);
  return {
    path,
    write: (next) => Deno.writeTextFile(path, next),
    async [Symbol.asyncDispose]() {
      await Deno.remove(dir, { recursive: true });
    },
  };
}

const SUMMARY = /^.*reload( refused)?: /;

function summaries(launcher: Launcher): string[] {
  return launcher.lines.filter((line) => SUMMARY.test(line));
}

/** Sends SIGHUP and waits for the summary line that answers it (the n-th). */
async function hup(launcher: Launcher, ms = 20_000): Promise<string> {
  const before = summaries(launcher).length;
  launcher.child.kill("SIGHUP");
  await waitFor(
    () => {
      if (launcher.status) {
        throw new Error(`launcher exited on SIGHUP:\n${launcher.stderr}`);
      }
      return summaries(launcher).length > before;
    },
    `a reload line in:\n${launcher.stderr}`,
    ms,
  );
  return summaries(launcher)[before]!;
}

async function pidOf(s: Setup, n: number): Promise<number> {
  let pid: number | undefined;
  await waitFor(async () => {
    pid = (await readRecord(s.records, s.port + n))?.pid;
    return pid !== undefined;
  }, `the stand-in engine on ${s.port + n}`);
  return pid!;
}

async function bothReady(port: number): Promise<void> {
  await waitFor(async () => {
    const body = await models(port, true);
    return Object.values(body.active).every((e) => e.state === "ready");
  }, "every engine ready");
}

Deno.test("reload: a changed card restarts only that engine, with its new argv; the other keeps its pid", async () => {
  await using cat = await catalogueFile(TWO);
  await using s = await launch(["alpha", "beta"], { catalogue: cat.path });
  await s.launcher.ready();
  await bothReady(s.port);
  const alpha = await pidOf(s, 1);
  const beta = await pidOf(s, 2);
  await cat.write(TWO.replace("4096", "8192"));
  const line = await hup(s.launcher);
  assert.match(line, /reload: 1 engine restarted \(alpha\)$/);
  let record: Awaited<ReturnType<typeof readRecord>>;
  await waitFor(async () => {
    record = await readRecord(s.records, s.port + 1);
    return record !== undefined && record.pid !== alpha;
  }, "alpha's new run");
  const argv = record!.argv;
  assert.equal(argv[argv.indexOf("--max-model-len") + 1], "8192");
  assert.ok(!pidAlive(alpha), "the old alpha run is gone");
  assert.equal(await pidOf(s, 2), beta, "beta keeps its pid");
  assert.ok(pidAlive(beta));
  await bothReady(s.port);
  const body = await models(s.port, true);
  assert.equal(
    body.active.alpha?.restarts,
    0,
    "a reload is not a crash restart",
  );
  assert.equal(body.active.alpha?.pid, record!.pid);
  assert.match(
    s.launcher.stderr,
    /engine alpha \(pid \d+\) exit: .* \(reload\)/,
  );
  assert.equal(s.launcher.status, undefined, "the launcher is alive");
});

Deno.test("reload: an unchanged reload restarts nothing, and new catalogue names appear in /models", async () => {
  await using cat = await catalogueFile(TWO);
  await using s = await launch(["alpha", "beta"], { catalogue: cat.path });
  await s.launcher.ready();
  const pids = [await pidOf(s, 1), await pidOf(s, 2)];
  assert.deepEqual((await models(s.port)).catalogue, ["alpha", "beta"]);
  const line = await hup(s.launcher);
  assert.match(line, /reload: nothing changed \(2 engines unchanged\)$/);
  await cat.write(`${TWO}  gamma: { verb: chat, hub: org/gamma }\n`);
  assert.match(
    await hup(s.launcher),
    /reload: catalogue updated \(\+gamma\)$/,
  );
  assert.deepEqual((await models(s.port)).catalogue, [
    "alpha",
    "beta",
    "gamma",
  ]);
  assert.deepEqual([await pidOf(s, 1), await pidOf(s, 2)], pids);
  assert.ok(pids.every(pidAlive));
});

Deno.test("reload: a changed restart: policy applies without a restart", async () => {
  const text = `models:
  crashy: { verb: chat, hub: org/crashy, args: { fake-crash-after-ms: 4000 } }
`;
  await using cat = await catalogueFile(text);
  await using s = await launch(["crashy"], { catalogue: cat.path });
  await s.launcher.ready();
  const pid = await pidOf(s, 1);
  await cat.write(text.replace("org/crashy,", "org/crashy, restart: never,"));
  assert.match(
    await hup(s.launcher),
    /reload: 1 changed without a restart \(crashy\)$/,
  );
  assert.equal(await pidOf(s, 1), pid, "not restarted by the reload");
  await s.launcher.waitForLine(
    /engine crashy .* exit: code 3 .*not restarted \(restart: never\)/,
  );
  const entry = (await models(s.port, true)).active.crashy!;
  assert.equal(entry.state, "exited");
  assert.equal(entry.restarts, 0);
});

Deno.test("reload: bad input is refused with nothing changed, the launcher alive; metrics count it", async () => {
  const fits = `models:
  alpha: { verb: chat, hub: org/alpha, gpus: 1 }
  beta: { verb: embed, hub: org/beta, gpus: 1 }
`;
  await using cat = await catalogueFile(fits);
  await using s = await launch(["alpha", "beta"], {
    catalogue: cat.path,
    args: ["--gpus", "0,1"],
  });
  await s.launcher.ready();
  const pids = [await pidOf(s, 1), await pidOf(s, 2)];
  const cases: [string, string, RegExp][] = [
    ["a broken catalogue", "models:\n  alpha: { verb: chat\n", /catalogue/i],
    [
      "an unknown field",
      fits.replace("gpus: 1 }", "gpus: 1, colour: blue }"),
      /colour/,
    ],
    ["a requested model removed", fits.split("\n  beta")[0]!, /beta/],
    [
      "an unset ${NAME}",
      fits.replace(
        "gpus: 1 }",
        'gpus: 1, args: { x: "${RELOAD_TEST_UNSET}" } }',
      ),
      /RELOAD_TEST_UNSET/,
    ],
    [
      "a placement that no longer fits",
      fits.replace("beta, gpus: 1", "beta, gpus: 2"),
      /Cannot place beta: needs 2 GPUs, 1 free/,
    ],
  ];
  for (const [what, text, pattern] of cases) {
    await cat.write(text);
    const line = await hup(s.launcher);
    assert.match(line, /reload refused: /, what);
    assert.match(line, pattern, what);
    assert.equal(line.split("\n").length, 1);
    assert.deepEqual([await pidOf(s, 1), await pidOf(s, 2)], pids, what);
    assert.ok(pids.every(pidAlive), what);
    const body = await models(s.port, true);
    assert.deepEqual(body.catalogue, ["alpha", "beta"], what);
    assert.deepEqual(body.active.beta?.gpus, ["1"], what);
  }
  assert.equal(s.launcher.status, undefined, "the launcher is alive");
  await cat.write(fits.replace("org/alpha,", "org/alpha, description: hi,"));
  const sent = Math.floor(Date.now() / 1000);
  assert.match(await hup(s.launcher), /reload: 1 changed without a restart/);
  const file = `${s.root}/metrics/mymodel_serve_${s.port}.prom`;
  let families = parse("");
  const countsOf = () =>
    Object.fromEntries(
      (families.get("mymodel_reloads_total")?.metrics ?? []).map((m) => [
        m.labels?.result,
        Number(m.value),
      ]),
    );
  // The file is rewritten behind the reload: read it once it has the reload
  // that took effect (a read between the two once saw ok 0).
  await waitFor(async () => {
    families = parse(await Deno.readTextFile(file).catch(() => ""));
    return families.has("mymodel_last_reload_timestamp_seconds") &&
      (countsOf().ok ?? 0) >= 1;
  }, "the reload metrics");
  assert.deepEqual(countsOf(), { ok: 1, refused: 5 });
  const at = Number(
    get(families, "mymodel_last_reload_timestamp_seconds").metrics[0]!.value,
  );
  // A time in seconds, of this reload: between its signal and now.
  assert.ok(sent <= at && at <= Date.now() / 1000, `${sent} <= ${at}`);
});

Deno.test("reload: SIGHUPs during a reload run one more reload after it, never two at once", async () => {
  // alpha ignores SIGTERM: its restart takes the whole --grace, the window
  // in which more SIGHUPs arrive.
  const text = `models:
  alpha: { verb: chat, hub: org/alpha, args: { fake-ignore-sigterm: true, max-model-len: 4096 } }
`;
  await using cat = await catalogueFile(text);
  await using s = await launch(["alpha"], {
    catalogue: cat.path,
    args: ["--grace", "2"],
  });
  await s.launcher.ready();
  const alpha = await pidOf(s, 1);
  await cat.write(text.replace("4096", "2048"));
  s.launcher.child.kill("SIGHUP");
  await new Promise((r) => setTimeout(r, 500));
  s.launcher.child.kill("SIGHUP");
  await new Promise((r) => setTimeout(r, 300));
  s.launcher.child.kill("SIGHUP");
  assert.equal(summaries(s.launcher).length, 0, "the first is still under way");
  await waitFor(() => summaries(s.launcher).length >= 2, "two reload lines");
  await new Promise((r) => setTimeout(r, 1_000));
  const lines = summaries(s.launcher);
  assert.equal(lines.length, 2, lines.join("\n"));
  assert.match(lines[0]!, /reload: 1 engine restarted \(alpha\)$/);
  assert.match(lines[1]!, /reload: nothing changed/);
  assert.equal(
    s.launcher.lines.filter((l) => /engine alpha .*\(reload\)/.test(l)).length,
    1,
  );
  assert.notEqual(await pidOf(s, 1), alpha);
  assert.ok(!pidAlive(alpha), "SIGKILL after the grace");
  assert.equal(s.launcher.status, undefined);
});

Deno.test("reload: a SIGHUP during start-up is kept and applied once the API listens", async () => {
  const release = Promise.withResolvers<void>();
  const asked = Promise.withResolvers<void>();
  let requests = 0;
  await using server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    async () => {
      requests++;
      asked.resolve();
      if (requests === 1) await release.promise;
      return new Response(TWO);
    },
  );
  const url = `http://127.0.0.1:${server.addr.port}/catalogue.yaml`;
  await using s = await launch(["alpha"], { args: ["--catalogue", url] });
  await asked.promise; // the launcher is reading its catalogue: not listening yet
  s.launcher.child.kill("SIGHUP");
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(s.launcher.status, undefined, "SIGHUP did not end it");
  assert.ok(!s.launcher.stderr.includes("listening on"));
  release.resolve();
  await s.launcher.ready();
  const line = await s.launcher.waitForLine(SUMMARY);
  assert.match(line, /reload: nothing changed \(1 engine unchanged\)$/);
  assert.equal(requests, 2, "the reload read the catalogue again");
  const listenAt = s.launcher.lines.findIndex((l) => /listening on/.test(l));
  const reloadAt = s.launcher.lines.findIndex((l) => SUMMARY.test(l));
  assert.ok(reloadAt > listenAt, "applied after the API listens");
});

/** The serial of the certificate a new TLS connection is served, and the chain's length. */
async function peer(port: number): Promise<{ serial: string; chain: number }> {
  const child = new Deno.Command("/usr/bin/openssl", {
    args: ["s_client", "-connect", `127.0.0.1:${port}`, "-showcerts"],
    stdin: "null",
    stdout: "piped",
    stderr: "null",
  });
  const text = new TextDecoder().decode((await child.output()).stdout);
  const first = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/
    .exec(text)?.[0];
  assert.ok(first, `no certificate in:\n${text}`);
  return {
    serial: await serial(first),
    chain: text.split("-----BEGIN CERTIFICATE-----").length - 1,
  };
}

/** A PEM certificate's serial number, lowercase hex. */
async function serial(pem: string): Promise<string> {
  const child = new Deno.Command("/usr/bin/openssl", {
    args: ["x509", "-noout", "-serial"],
    stdin: "piped",
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(pem));
  await writer.close();
  const text = new TextDecoder().decode((await child.output()).stdout);
  return text.trim().replace(/^serial=/, "").toLowerCase();
}

/** One request on an open TLS connection; resolves with the status line. */
async function ask(conn: Deno.TlsConn): Promise<string> {
  await conn.write(
    new TextEncoder().encode("GET /health HTTP/1.1\r\nhost: localhost\r\n\r\n"),
  );
  const buffer = new Uint8Array(4096);
  let text = "";
  while (!/\r\n\r\n[\s\S]*\}/.test(text)) {
    const n = await conn.read(buffer);
    if (n === null) throw new Error(`connection closed after: ${text}`);
    text += new TextDecoder().decode(buffer.subarray(0, n));
  }
  return text.split("\r\n")[0]!;
}

Deno.test("reload: a renewed certificate is served to new connections; an open one keeps its own", async () => {
  const material = await Deno.makeTempDir({ prefix: "serve-certs-" });
  const root = await makeRoot();
  try {
    const m = await makeMaterial(material);
    await Deno.mkdir(`${root}/ssl`);
    await Deno.writeTextFile(`${root}/ssl/server.crt`, m.serverCrt);
    await Deno.writeTextFile(`${root}/ssl/server.key`, m.serverKey);
    await Deno.writeTextFile(`${root}/ssl/ca.crt`, m.caCrt);
    await using s = await launch(["alpha"], { root });
    await s.launcher.ready();
    const before = await peer(s.port);
    assert.equal(before.serial, await serial(m.serverCrt));
    assert.equal(before.chain, 2, "development mode appends ca.crt");
    const open = await Deno.connectTls({
      hostname: "127.0.0.1",
      port: s.port,
      caCerts: [m.caCrt],
    });
    try {
      assert.match(await ask(open), /^HTTP\/1\.1 200/);
      // The renewal: a new pair (here self-signed RSA), ca.crt unchanged.
      await Deno.writeTextFile(`${root}/ssl/server.crt`, m.rsaCrt);
      await Deno.writeTextFile(`${root}/ssl/server.key`, m.rsaKey);
      const renewed = await serial(m.rsaCrt);
      assert.match(
        await hup(s.launcher),
        new RegExp(`reload: TLS pair reloaded \\(serial 0x${renewed}\\)$`),
      );
      const after = await peer(s.port);
      assert.equal(after.serial, renewed, "a new connection gets the new pair");
      assert.equal(after.chain, 2);
      assert.match(
        await ask(open),
        /^HTTP\/1\.1 200/,
        "the open one still works",
      );
    } finally {
      open.close();
    }
    await Deno.remove(`${root}/ssl/server.key`);
    assert.match(
      await hup(s.launcher),
      /reload refused: Cannot configure TLS: .*server\.key: missing/,
    );
    assert.equal((await peer(s.port)).serial, await serial(m.rsaCrt));
  } finally {
    await Deno.remove(material, { recursive: true });
  }
});

const ISSUER = "https://idp.example";

function token(secret: string): Promise<string> {
  return new SignJWT({ aud: "nexus", iss: ISSUER })
    .setProtectedHeader({ alg: "HS512", typ: "JWT" })
    .setIssuedAt()
    .setExpirationTime("5m")
    .sign(new TextEncoder().encode(secret));
}

async function status(port: number, bearer: string): Promise<number> {
  const response = await fetch(`http://127.0.0.1:${port}/models`, {
    headers: { authorization: `Bearer ${bearer}` },
  });
  await response.body?.cancel();
  return response.status;
}

Deno.test("reload: a rotated secret accepts new tokens and refuses old ones; a new engine key serves the next start", async () => {
  const secrets = await Deno.makeTempDir({ prefix: "serve-secrets-" });
  const first = "first-secret-".repeat(6);
  const second = "second-secret-".repeat(6);
  await Deno.writeTextFile(`${secrets}/idp`, first, { mode: 0o600 });
  await Deno.writeTextFile(`${secrets}/key`, "key-one", { mode: 0o600 });
  try {
    await using cat = await catalogueFile(TWO);
    await using s = await launch(["alpha", "beta"], {
      catalogue: cat.path,
      env: {
        NUCLEUS_MODE: "production",
        IDP_ISSUER: ISSUER,
        IDP_SECRET_FILE: `${secrets}/idp`,
        LOCAL_ENGINE_API_KEY_FILE: `${secrets}/key`,
      },
    });
    await s.launcher.ready();
    const old = await token(first);
    assert.equal(await status(s.port, old), 200);
    assert.equal(await status(s.port, old), 200, "used again");
    const beta = await pidOf(s, 2);
    await Deno.writeTextFile(`${secrets}/idp`, second);
    await Deno.writeTextFile(`${secrets}/key`, "key-two");
    assert.match(
      await hup(s.launcher),
      /reload: secret reloaded, engine API key reloaded \(used from each engine's next start\)$/,
    );
    assert.equal(await status(s.port, old), 401, "the old token is refused");
    assert.equal(await status(s.port, await token(second)), 200);
    assert.equal(await pidOf(s, 2), beta, "no engine restarted for the key");
    const betaArgv = (await readRecord(s.records, s.port + 2))!.argv;
    assert.equal(betaArgv[betaArgv.indexOf("--api-key") + 1], "key-one");
    // alpha's next start (its card changed) demands the new key.
    const alpha = await pidOf(s, 1);
    await cat.write(TWO.replace("4096", "1024"));
    assert.match(
      await hup(s.launcher),
      /reload: 1 engine restarted \(alpha\)$/,
    );
    let argv: string[] = [];
    await waitFor(async () => {
      const record = await readRecord(s.records, s.port + 1);
      argv = record?.argv ?? [];
      return record !== undefined && record.pid !== alpha;
    }, "alpha's new run");
    assert.equal(argv[argv.indexOf("--api-key") + 1], "key-two");
    assert.ok(
      !s.launcher.stderr.includes("key-two"),
      "the key is never logged",
    );
    assert.ok(!s.launcher.stderr.includes(second));
    // An empty secret file is refused as at start, and the secret stays.
    await Deno.writeTextFile(`${secrets}/idp`, "");
    assert.match(
      await hup(s.launcher),
      /reload refused: Cannot use IDP_SECRET_FILE=.*: the file is empty/,
    );
    assert.equal(await status(s.port, await token(second)), 200);
  } finally {
    await Deno.remove(secrets, { recursive: true });
  }
});

/**
 * Runs `body` against an in-process launcher of alpha and beta (stand-in
 * engines, development mode, no signal handlers) once it listens, then stops it.
 */
async function withInProcess(
  catalogue: string | URL,
  body: (serve: Semioserve) => Promise<void>,
): Promise<Semioserve> {
  await using site = await inProcessSite();
  const listening = Promise.withResolvers<URL>();
  const names = ["alpha", "beta"];
  const serve = new Semioserve({
    models: names,
    host: "127.0.0.1",
    // The management port and one per engine, as launch() takes them.
    port: freePorts(names.length),
    directory: site.root,
    catalogue,
    dev_mode: true,
    handleSignals: false,
    onListen: (url) => listening.resolve(url),
  });
  const running = serve.run();
  try {
    await listening.promise;
    await body(serve);
  } finally {
    await serve.stop();
    await running;
  }
  return serve;
}

Deno.test("reload: Semioserve.reload() with unchanged engines (the measured reload time)", async () => {
  const serve = await withInProcess(STAND_IN_CATALOGUE, async (serve) => {
    const pids = serve.engines.map((engine) => engine.pid);
    const times: number[] = [];
    for (let i = 0; i < 5; i++) {
      const result = await serve.reload();
      assert.equal(result.ok, true, result.error);
      assert.deepEqual(result.restarted, []);
      assert.deepEqual(result.unchanged, ["alpha", "beta"]);
      assert.equal(
        result.summary,
        "reload: nothing changed (2 engines unchanged)",
      );
      times.push(result.ms);
    }
    assert.deepEqual(serve.engines.map((engine) => engine.pid), pids);
    times.sort((a, b) => a - b);
    console.log(
      `reload with 2 unchanged engines: median ${
        times[2]!.toFixed(1)
      } ms, max ${times[4]!.toFixed(1)} ms`,
    );
    assert.ok(times[2]! < 1_000, `median ${times[2]} ms`);
  });
  const after = await serve.reload();
  assert.equal(after.ok, false, "no reload once stopped");
});

Deno.test("reload: a replaced engine is not stopped while a neighbour loads on its device (one line), then starts after that load", async () => {
  // fast loads in 0.3 s; slow loads for 5 s on the same device. A reload of
  // fast during slow's load waits for it before stopping fast (vLLM measures
  // device-wide free memory while it loads: issue 30, item 4).
  const text = `models:
  fast: { verb: embed, hub: org/fast, args: { gpu-memory-utilization: 0.3, fake-load-ms: 300, max-model-len: 4096 } }
  slow: { verb: embed, hub: org/slow, args: { gpu-memory-utilization: 0.3, fake-load-ms: 5000 } }
`;
  await using cat = await catalogueFile(text);
  await using s = await launch(["fast", "slow"], {
    catalogue: cat.path,
    args: ["--gpus", "0", "--health-interval", "0.3"],
  });
  await s.launcher.ready();
  const fast = await pidOf(s, 1);
  await pidOf(s, 2); // slow spawned: fast's load is over, slow's has begun
  await cat.write(text.replace("4096", "2048"));
  s.launcher.child.kill("SIGHUP");
  await s.launcher.waitForLine(
    /the reload's restart of engine fast waits until engine slow on GPU 0 has started/,
  );
  assert.equal((await models(s.port, true)).active.fast?.state, "ready");
  const next = await pidOf(s, 1).then(async function newer(): Promise<number> {
    const pid = await pidOf(s, 1);
    if (pid !== fast) return pid;
    await new Promise((r) => setTimeout(r, 50));
    return newer();
  });
  const slow = await readRecord(s.records, s.port + 2);
  const replaced = await readRecord(s.records, s.port + 1);
  assert.equal(replaced?.pid, next);
  assert.ok(
    replaced!.startedAt >= slow!.startedAt + 5000,
    "the replacement spawned only once slow's load was over",
  );
  assert.ok(replaced!.argv.includes("2048"));
});

Deno.test("reload: the engines it restarts get the start-up checks' warnings (an unknown engine flag), logged and in the result", async () => {
  await using cat = await catalogueFile(TWO);
  await withInProcess(cat.path, async (serve) => {
    const same = await serve.reload();
    assert.equal(same.ok, true, same.error);
    assert.deepEqual(same.warnings, [], "nothing restarted, nothing to warn");
    await cat.write(
      TWO.replace("max-model-len: 4096", "max-model-length: 8192"),
    );
    const result = await serve.reload();
    assert.equal(result.ok, true, result.error);
    assert.deepEqual(result.restarted, ["alpha"]);
    assert.deepEqual(result.warnings, [
      "alpha: --max-model-length is not a known vLLM flag (did you mean --max-model-len?)",
    ]);
  });
});
