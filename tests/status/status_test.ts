/**
 * The status view against live launchers started through the real CLI with
 * stand-in engines: the table, `--json`, `--check`, no launcher, 401 in
 * production mode, HTTPS with a certificate made in the test run.
 */
import assert from "node:assert/strict";
import { SignJWT } from "jose";
import { makeMaterial } from "../support/certs.ts";
import {
  fakeBin,
  freePorts,
  launch,
  Launcher,
  makeRoot,
  models,
  pathWith,
  siteArgs,
  waitFor,
} from "../support/helpers.ts";

const STATUS = new URL("../../src/status.ts", import.meta.url).pathname;

/** Runs the status CLI with a clean environment plus `env`. */
async function status(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  const base: Record<string, string> = { NO_COLOR: "1" };
  for (const name of ["PATH", "HOME", "DENO_DIR"]) {
    const value = Deno.env.get(name);
    if (value !== undefined) base[name] = value;
  }
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--quiet", STATUS, ...args],
    env: { ...base, ...env },
    clearEnv: true,
    stdin: "null",
  }).output();
  const decode = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
  return {
    code: out.code,
    stdout: decode(out.stdout),
    stderr: decode(out.stderr),
  };
}

Deno.test("status shows one aligned row per engine; --json is the answer; --check exits 3 with an unhealthy engine", async () => {
  await using site = await launch(["alpha", "loading"]);
  await site.launcher.ready();
  await waitFor(
    async () => (await models(site.port)).active.alpha?.healthy === true,
    "alpha healthy",
  );
  const where = ["--host", "127.0.0.1", "--port", String(site.port)];

  const table = await status(where);
  assert.equal(table.code, 0, table.stderr);
  const lines = table.stdout.trimEnd().split("\n");
  assert.equal(lines.length, 3, table.stdout);
  assert.match(
    lines[0]!,
    /^MODEL +VERB +STATE +HEALTHY +REQ +TOK\/S +PID +GPUS +MEM +RESTARTS +SINCE +LAST EXIT +URL$/,
  );
  assert.match(
    lines[1]!,
    new RegExp(
      `^alpha +chat +ready +yes +- +- +\\d+ +- +- +0 +(just now|\\d+s ago) +- +http://127\\.0\\.0\\.1:${
        site.port + 1
      }/v1$`,
    ),
  );
  assert.match(lines[2]!, /^loading +chat +starting +no +- +- +\d+ /);
  assert.equal(lines[1]!.indexOf("chat"), lines[2]!.indexOf("chat"));
  assert.ok(!table.stdout.includes("\x1b["), "no colour with NO_COLOR");

  const json = await status([...where, "--json"]);
  assert.equal(json.code, 0, json.stderr);
  const body = JSON.parse(json.stdout);
  assert.deepEqual(Object.keys(body.active), ["alpha", "loading"]);
  assert.equal(body.active.alpha.state, "ready");
  assert.equal(body.active.loading.healthy, false);
  assert.ok(body.catalogue.includes("beta"));

  const check = await status([...where, "--check"]);
  assert.equal(check.code, 3, check.stderr);
  assert.match(check.stdout, /loading +chat +starting +no/);
});

Deno.test("status --check exits 0 when every engine is healthy", async () => {
  await using site = await launch(["alpha"]);
  await site.launcher.ready();
  await waitFor(
    async () => (await models(site.port)).active.alpha?.healthy === true,
    "alpha healthy",
  );
  const check = await status([
    "--check",
    "--url",
    `http://127.0.0.1:${site.port}`,
  ]);
  assert.equal(check.code, 0, check.stderr);
  assert.match(check.stdout, /alpha +chat +ready +yes/);
});

Deno.test("status with no launcher says so in one line and exits 1", async () => {
  const port = freePorts(1);
  const { code, stdout, stderr } = await status([], {
    NUCLEUS_HOST: "localhost",
    NUCLEUS_PORT: String(port),
  });
  assert.equal(code, 1);
  assert.equal(stdout, "");
  assert.equal(
    stderr,
    `Cannot reach the launcher at http://localhost:${port}: connection refused (is it running? --port?)\n`,
  );
});

Deno.test("status usage errors exit 2 with one line", async () => {
  for (
    const args of [["--port", "70000"], ["--bogus"], ["--watch", "x"], [
      "--check",
      "--watch",
      "1",
    ]]
  ) {
    const { code, stderr } = await status(args);
    assert.equal(code, 2, args.join(" "));
    assert.equal(stderr.trimEnd().split("\n").length, 1, stderr);
    assert.match(stderr, /^Cannot .*\(see --help\)\n$/);
  }
});

const SECRET =
  "a-production-secret-that-is-at-least-sixty-four-bytes-long-0123456789";
const ISSUER = "https://idp.example";

Deno.test("status against a production launcher: 401 without a token, the table with NUCLEUS_TOKEN or --token-file", async () => {
  const root = await makeRoot();
  const bin = await fakeBin();
  const port = freePorts(1);
  const launcher = new Launcher(["alpha", ...siteArgs(port, root)], {
    PATH: pathWith(bin),
    NUCLEUS_MODE: "production",
    IDP_SECRET: SECRET,
    IDP_ISSUER: ISSUER,
  });
  try {
    await launcher.ready();
    const where = ["--host", "127.0.0.1", "--port", String(port)];
    const refused = await status(where);
    assert.equal(refused.code, 1);
    assert.equal(
      refused.stderr,
      `Cannot read the launcher's state at http://127.0.0.1:${port}: it answered 401: set NUCLEUS_TOKEN or --token-file\n`,
    );
    const token = await new SignJWT({ aud: "nexus", iss: ISSUER })
      .setProtectedHeader({ alg: "HS512", typ: "JWT" })
      .setIssuedAt()
      .setExpirationTime("5m")
      .sign(new TextEncoder().encode(SECRET));
    const byEnv = await status(where, { NUCLEUS_TOKEN: token });
    assert.equal(byEnv.code, 0, byEnv.stderr);
    assert.match(byEnv.stdout, /^alpha +chat /m);
    const file = `${root}/token`;
    await Deno.writeTextFile(file, `${token}\n`, { mode: 0o600 });
    const byFile = await status([...where, "--token-file", file]);
    assert.equal(byFile.code, 0, byFile.stderr);
    assert.match(byFile.stdout, /^alpha +chat /m);
    const wrong = await status(where, { NUCLEUS_TOKEN: `${token}x` });
    assert.equal(wrong.code, 1);
    assert.match(wrong.stderr, /answered 401 to the token given/);
  } finally {
    await launcher.stop();
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});

Deno.test("status speaks HTTPS when the directory holds the cert pair, trusting ca.crt; a TLS failure names what it trusted", async () => {
  const certs = await Deno.makeTempDir({ prefix: "status-certs-" });
  const root = await makeRoot();
  const other = await Deno.makeTempDir({ prefix: "status-other-" });
  const bin = await fakeBin();
  const port = freePorts(1);
  let launcher: Launcher | undefined;
  try {
    const pem = await makeMaterial(certs);
    await Deno.mkdir(`${root}/ssl`);
    await Deno.writeTextFile(`${root}/ssl/server.crt`, pem.serverCrt);
    await Deno.writeTextFile(`${root}/ssl/server.key`, pem.serverKey);
    await Deno.writeTextFile(`${root}/ssl/ca.crt`, pem.caCrt);
    launcher = new Launcher(["alpha", ...siteArgs(port, root)], {
      PATH: pathWith(bin),
      NUCLEUS_MODE: "dev",
    });
    await launcher.ready();
    const where = ["--host", "127.0.0.1", "--port", String(port)];

    // MY_LOCAL stands for --directory, as for the launcher.
    const ok = await status(where, { MY_LOCAL: root });
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /^alpha +chat /m);

    // A directory whose pair is another (self-signed) certificate: trusted, and wrong.
    await Deno.mkdir(`${other}/ssl`);
    await Deno.writeTextFile(`${other}/ssl/server.crt`, pem.rsaCrt);
    await Deno.writeTextFile(`${other}/ssl/server.key`, pem.rsaKey);
    const bad = await status([...where, "--directory", other]);
    assert.equal(bad.code, 1);
    assert.equal(bad.stderr.trimEnd().split("\n").length, 1, bad.stderr);
    assert.ok(
      bad.stderr.startsWith(
        `Cannot reach the launcher at https://127.0.0.1:${port}: TLS failed: `,
      ),
      bad.stderr,
    );
    assert.ok(
      bad.stderr.includes(`(trusted ${other}/ssl/server.crt;`),
      bad.stderr,
    );
  } finally {
    await launcher?.stop();
    for (const dir of [certs, root, other, bin]) {
      await Deno.remove(dir, { recursive: true });
    }
  }
});

Deno.test("status --url https:// against a plain-HTTP launcher says it answers plain HTTP; http:// against a TLS one says it may serve TLS", async () => {
  const certs = await Deno.makeTempDir({ prefix: "status-certs-" });
  try {
    await using plain = await launch(["alpha"]);
    await plain.launcher.ready();
    // Said at once: the line names the TLS failure, not the 10 s timeout.
    const https = await status(["--url", `https://127.0.0.1:${plain.port}`]);
    assert.equal(https.code, 1);
    assert.equal(
      https.stderr,
      `Cannot reach the launcher at https://127.0.0.1:${plain.port}: TLS failed: it answers plain HTTP (expected TLS at an https:// URL; try --url http://127.0.0.1:${plain.port}, or give the launcher its certificate pair in <directory>/ssl/)\n`,
    );

    const pem = await makeMaterial(certs);
    const root = await makeRoot();
    await Deno.mkdir(`${root}/ssl`);
    await Deno.writeTextFile(`${root}/ssl/server.crt`, pem.serverCrt);
    await Deno.writeTextFile(`${root}/ssl/server.key`, pem.serverKey);
    await using tls = await launch(["alpha"], { root });
    await tls.launcher.ready();
    const http = await status(["--url", `http://127.0.0.1:${tls.port}`]);
    assert.equal(http.code, 1);
    assert.equal(
      http.stderr,
      `Cannot reach the launcher at http://127.0.0.1:${tls.port}: the answer is not HTTP: the launcher may serve TLS (expected plain HTTP at an http:// URL; try --url https://127.0.0.1:${tls.port}, with --directory naming its root to trust its ssl/ certificate)\n`,
    );
  } finally {
    await Deno.remove(certs, { recursive: true });
  }
});
