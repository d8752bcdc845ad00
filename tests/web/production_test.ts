/**
 * Production mode and TLS through the real launcher CLI in a subprocess:
 * tokens minted with jose, certificates made by openssl in the test run.
 */
import assert from "node:assert/strict";
import { SignJWT } from "jose";
import { makeMaterial } from "../support/certs.ts";
import {
  fakeBin,
  freePorts,
  Launcher,
  listDir,
  listening,
  makeRoot,
  pathWith,
  siteArgs,
} from "../support/helpers.ts";

const SECRET =
  "a-production-secret-that-is-at-least-sixty-four-bytes-long-0123456789";
const ISSUER = "https://idp.example";

function token(
  claims: Record<string, unknown> = {},
  secret = SECRET,
): Promise<string> {
  return new SignJWT({ aud: "nexus", iss: ISSUER, ...claims })
    .setProtectedHeader({ alg: "HS512", typ: "JWT" })
    .setIssuedAt()
    .setExpirationTime("5m")
    .sign(new TextEncoder().encode(secret));
}

interface Site extends AsyncDisposable {
  root: string;
  port: number;
  records: string;
  start(args?: string[], env?: Record<string, string>): Launcher;
}

async function site(ssl?: Record<string, string>): Promise<Site> {
  const root = await makeRoot();
  const bin = await fakeBin();
  const records = await Deno.makeTempDir();
  if (ssl) {
    await Deno.mkdir(`${root}/ssl`);
    for (const [name, text] of Object.entries(ssl)) {
      await Deno.writeTextFile(`${root}/ssl/${name}`, text);
    }
  }
  const port = freePorts(1);
  const launchers: Launcher[] = [];
  return {
    root,
    port,
    records,
    start(args = [], env = {}) {
      const launcher = new Launcher(
        ["alpha", ...siteArgs(port, root), ...args],
        {
          PATH: pathWith(bin),
          FAKE_ENGINE_RECORD_DIR: records,
          NUCLEUS_MODE: "production",
          IDP_SECRET: SECRET,
          IDP_ISSUER: ISSUER,
          ...env,
        },
      );
      launchers.push(launcher);
      return launcher;
    },
    async [Symbol.asyncDispose]() {
      for (const l of launchers) await l.stop();
      for (const dir of [root, bin, records]) {
        await Deno.remove(dir, { recursive: true });
      }
    },
  };
}

async function call(
  url: string,
  init?: RequestInit & { client?: Deno.HttpClient },
) {
  const response = await fetch(url, init);
  return {
    status: response.status,
    headers: response.headers,
    text: await response.text(),
  };
}

Deno.test("production: every path needs a valid HS512 token; with one, /models answers", async () => {
  await using s = await site();
  const launcher = s.start();
  await launcher.ready();
  assert.match(launcher.stderr, /mode: production \(HS512 JWT required/);
  assert.match(
    launcher.stderr,
    /listening on http:\/\/127\.0\.0\.1:\d+ \(plain HTTP\)/,
  );
  const base = `http://127.0.0.1:${s.port}`;
  for (const path of ["/models", "/health", "/nowhere"]) {
    const denied = await call(`${base}${path}`);
    assert.equal(denied.status, 401, path);
    assert.equal(denied.text, "Unauthorized");
    assert.equal(denied.headers.get("content-type"), "text/plain");
    assert.equal(denied.headers.get("www-authenticate"), "Bearer");
  }
  const wrongKey = await call(`${base}/models`, {
    headers: {
      authorization: `Bearer ${await token({}, "another secret".repeat(8))}`,
    },
  });
  assert.equal(wrongKey.status, 401);
  const good = await token();
  const ok = await call(`${base}/models`, {
    headers: { authorization: `bearer ${good}` },
  });
  assert.equal(ok.status, 200);
  assert.ok(JSON.parse(ok.text).active.alpha);
  const missing = await call(`${base}/nowhere`, {
    headers: { authorization: `Bearer ${good}` },
  });
  assert.equal(
    missing.status,
    404,
    "routes are reached only after authentication",
  );
  assert.ok(!launcher.stderr.includes(good), "the token is never logged");
});

Deno.test("production: --dev_mode wins over NUCLEUS_MODE, and --dev_mode=false over NUCLEUS_MODE=dev", async () => {
  await using s = await site();
  const dev = s.start(["--dev_mode"]);
  await dev.ready();
  assert.match(dev.stderr, /mode: development/);
  assert.equal((await call(`http://127.0.0.1:${s.port}/health`)).status, 200);
  await dev.stop();
  const prod = s.start(["--dev_mode=false"], { NUCLEUS_MODE: "dev" });
  await prod.ready();
  assert.match(prod.stderr, /mode: production/);
  assert.equal((await call(`http://127.0.0.1:${s.port}/health`)).status, 401);
  await prod.stop();
  const alias = s.start(["--no-dev-mode"], { NUCLEUS_MODE: "development" });
  await alias.ready();
  assert.match(alias.stderr, /mode: production/);
});

Deno.test("production: a secret shorter than 64 bytes starts with a warning", async () => {
  await using s = await site();
  const launcher = s.start([], { IDP_SECRET: "short-secret" });
  await launcher.ready();
  assert.match(
    launcher.stderr,
    /warn: IDP_SECRET is 12 bytes; HS512 wants .*64 bytes/,
  );
});

for (
  const [env, missing] of [[{ IDP_SECRET: "" }, /IDP_SECRET must be set/], [{
    IDP_ISSUER: "",
  }, /IDP_ISSUER must be set/]] as const
) {
  Deno.test(`production: an empty ${Object.keys(env)[0]} refuses to start, nothing listening, no engine`, async () => {
    await using s = await site();
    const launcher = s.start([], env);
    assert.equal((await launcher.exited()).code, 1);
    assert.match(launcher.stderr, missing);
    assert.equal(
      launcher.lines.filter((l) => l.trim()).length,
      1,
      launcher.stderr,
    );
    assert.deepEqual(listDir(s.records), []);
    assert.ok(!(await listening(s.port)) && !(await listening(s.port + 1)));
  });
}

Deno.test("TLS: with ssl/server.crt and server.key the API is served over HTTPS only", async () => {
  const dir = await Deno.makeTempDir();
  const m = await makeMaterial(dir);
  await using s = await site({
    "server.crt": m.serverCrt,
    "server.key": m.serverKey,
  });
  const launcher = s.start();
  await launcher.ready();
  assert.match(
    launcher.stderr,
    new RegExp(`listening on https://127\\.0\\.0\\.1:${s.port} \\(TLS`),
  );
  using client = Deno.createHttpClient({ caCerts: [m.caCrt] });
  const base = `https://127.0.0.1:${s.port}`;
  const denied = await call(`${base}/models`, { client });
  assert.equal(denied.status, 401);
  assert.equal(
    denied.headers.get("strict-transport-security"),
    "max-age=31536000",
  );
  const ok = await call(`${base}/models`, {
    client,
    headers: { authorization: `Bearer ${await token()}` },
  });
  assert.equal(ok.status, 200);
  assert.equal(
    JSON.parse(ok.text).active.alpha.url,
    `http://127.0.0.1:${s.port + 1}/v1`,
    "engines stay http",
  );
  await assert.rejects(
    fetch(`http://127.0.0.1:${s.port}/health`),
    "plain HTTP to the TLS port fails",
  );
  await assert.rejects(
    fetch(`${base}/health`),
    "a client that does not trust the CA fails",
  );
  await Deno.remove(dir, { recursive: true });
});

Deno.test("TLS: development mode appends ssl/ca.crt to the served chain", async () => {
  const dir = await Deno.makeTempDir();
  const m = await makeMaterial(dir);
  await using s = await site({
    "server.crt": m.serverCrt,
    "server.key": m.serverKey,
    "ca.crt": m.caCrt,
  });
  const launcher = s.start(["--dev_mode"]);
  await launcher.ready();
  // openssl shows the chain the server sends: the leaf, then the CA.
  const { stdout } = await new Deno.Command("openssl", {
    args: [
      "s_client",
      "-connect",
      `127.0.0.1:${s.port}`,
      "-showcerts",
      "-servername",
      "localhost",
    ],
    stdin: "null",
    stdout: "piped",
    stderr: "null",
  }).output();
  const text = new TextDecoder().decode(stdout);
  assert.match(text, /0 s:CN\s*=\s*localhost/);
  assert.match(text, /1 s:CN\s*=\s*serve test CA/);
  using client = Deno.createHttpClient({ caCerts: [m.caCrt] });
  assert.equal(
    (await call(`https://127.0.0.1:${s.port}/health`, { client })).status,
    200,
  );
  await Deno.remove(dir, { recursive: true });
});

for (
  const [name, files, message] of [
    [
      "only the certificate",
      (m: Awaited<ReturnType<typeof makeMaterial>>) => ({
        "server.crt": m.serverCrt,
      }),
      /server\.key/,
    ],
    [
      "a key that does not match",
      (m: Awaited<ReturnType<typeof makeMaterial>>) => ({
        "server.crt": m.serverCrt,
        "server.key": m.otherKey,
      }),
      /server\.crt.*server\.key|server\.key.*server\.crt/,
    ],
    [
      "a certificate that is not PEM",
      (m: Awaited<ReturnType<typeof makeMaterial>>) => ({
        "server.crt": "garbage",
        "server.key": m.serverKey,
      }),
      /server\.crt/,
    ],
  ] as const
) {
  Deno.test(`TLS: ${name} refuses to start before any engine starts`, async () => {
    const dir = await Deno.makeTempDir();
    const m = await makeMaterial(dir);
    await using s = await site(files(m));
    const launcher = s.start();
    assert.equal((await launcher.exited()).code, 1);
    const lines = launcher.lines.filter((l) => l.trim());
    assert.equal(lines.length, 1, launcher.stderr);
    assert.match(lines[0]!, /Cannot configure TLS/);
    assert.match(lines[0]!, message);
    assert.deepEqual(listDir(s.records), []);
    assert.ok(!(await listening(s.port)));
    await Deno.remove(dir, { recursive: true });
  });
}
