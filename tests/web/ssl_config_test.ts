/**
 * SSLConfig against real certificates made by Debian's openssl in a temporary
 * directory: a CA, a server certificate for 127.0.0.1/localhost signed by it
 * (EC P-256, SHA-256), an unrelated key, and an RSA 2048 self-signed pair.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { captureLog } from "../support/helpers.ts";
import { makeMaterial } from "../support/certs.ts";
import { AuthMiddleware, SSLConfig } from "../../src/web.ts";
import { SSLConfigError } from "../../src/web/ssl_config.ts";

async function rejects(
  promise: Promise<unknown>,
  ...mustName: string[]
): Promise<SSLConfigError> {
  const error = await promise.then(
    () => assert.fail("no error was thrown"),
    (error: unknown) => error,
  );
  assert.ok(error instanceof SSLConfigError, `not an SSLConfigError: ${error}`);
  assert.equal(error.name, "SSLConfigError");
  assert.match(error.message, /^Cannot configure TLS: [^\n]+$/);
  for (const text of mustName) {
    assert.ok(error.message.includes(text), `${error.message} lacks ${text}`);
  }
  return error;
}

async function serveOnce(
  tls: SSLConfig,
  ca: string,
  handler: (req: Request) => Response | Promise<Response>,
  check: (url: string, client: Deno.HttpClient) => Promise<void>,
): Promise<void> {
  await using server = Deno.serve({
    cert: tls.cert,
    key: tls.key,
    hostname: "127.0.0.1",
    port: 0,
    onListen: () => {},
  }, handler);
  using client = Deno.createHttpClient({ caCerts: [ca] });
  await check(`https://127.0.0.1:${server.addr.port}`, client);
}

/** A fresh directory under `root` holding `ssl/` with the given files. */
async function makeSite(
  root: string,
  files: Record<string, string>,
): Promise<string> {
  const dir = await Deno.makeTempDir({ dir: root, prefix: "site" });
  await Deno.mkdir(join(dir, "ssl"));
  for (const [name, text] of Object.entries(files)) {
    await Deno.writeTextFile(join(dir, "ssl", name), text);
  }
  return dir;
}

Deno.test("SSLConfig.fromDirectory", async (t) => {
  const root = await Deno.makeTempDir({ prefix: "ssl_config_test_" });
  try {
    const material = await makeMaterial(root);
    const site = (files: Record<string, string>) => makeSite(root, files);

    await t.step("neither file present: undefined (plain HTTP)", async () => {
      const empty = join(root, "nothing");
      await Deno.mkdir(empty);
      assert.equal(await SSLConfig.fromDirectory(empty), undefined);
      assert.equal(await SSLConfig.fromDirectory(await site({})), undefined);
      // ca.crt alone does not turn TLS on.
      const onlyCa = await site({ "ca.crt": material.caCrt });
      assert.equal(
        await SSLConfig.fromDirectory(onlyCa, { devMode: true }),
        undefined,
      );
    });

    await t.step(
      "only server.crt: the error names the missing server.key",
      async () => {
        const dir = await site({ "server.crt": material.serverCrt });
        const error = await rejects(
          SSLConfig.fromDirectory(dir),
          join(dir, "ssl", "server.key"),
          "missing",
        );
        assert.ok(
          error.message.startsWith(
            `Cannot configure TLS: ${join(dir, "ssl", "server.key")}: `,
          ),
        );
      },
    );

    await t.step(
      "only server.key: the error names the missing server.crt",
      async () => {
        const dir = await site({ "server.key": material.serverKey });
        const error = await rejects(
          SSLConfig.fromDirectory(dir),
          join(dir, "ssl", "server.crt"),
          "missing",
        );
        assert.ok(
          error.message.startsWith(
            `Cannot configure TLS: ${join(dir, "ssl", "server.crt")}: `,
          ),
        );
      },
    );

    await t.step(
      "unreadable server.key (a directory in its place): named, cause kept",
      async () => {
        // Tests run as root, which reads a chmod 000 file anyway; a directory
        // cannot be read as a file by anyone.
        const dir = await site({ "server.crt": material.serverCrt });
        await Deno.mkdir(join(dir, "ssl", "server.key"));
        const error = await rejects(
          SSLConfig.fromDirectory(dir),
          join(dir, "ssl", "server.key"),
          "cannot read",
        );
        assert.ok(error.cause instanceof Error);
      },
    );

    await t.step(
      "unreadable server.crt (a dangling symlink): named, not taken as absent",
      async () => {
        const dir = await site({ "server.key": material.serverKey });
        await Deno.symlink(
          join(dir, "ssl", "no-such-file.crt"),
          join(dir, "ssl", "server.crt"),
        );
        await rejects(
          SSLConfig.fromDirectory(dir),
          join(dir, "ssl", "server.crt"),
          "cannot read",
        );
      },
    );

    await t.step(
      "a certificate and key that do not match: both files named",
      async () => {
        const dir = await site({
          "server.crt": material.serverCrt,
          "server.key": material.otherKey,
        });
        await rejects(
          SSLConfig.fromDirectory(dir),
          join(dir, "ssl", "server.crt"),
          join(dir, "ssl", "server.key"),
          "does not belong",
        );
      },
    );

    await t.step(
      "an RSA certificate with an EC key: both files named",
      async () => {
        const dir = await site({
          "server.crt": material.rsaCrt,
          "server.key": material.serverKey,
        });
        await rejects(
          SSLConfig.fromDirectory(dir),
          join(dir, "ssl", "server.crt"),
          join(dir, "ssl", "server.key"),
        );
      },
    );

    await t.step("not PEM: the file is named", async () => {
      const badCert = await site({
        "server.crt": "hello, I am not a certificate\n",
        "server.key": material.serverKey,
      });
      await rejects(
        SSLConfig.fromDirectory(badCert),
        join(badCert, "ssl", "server.crt"),
        "not a PEM certificate",
      );
      const badKey = await site({
        "server.crt": material.serverCrt,
        "server.key": material.serverCrt, // a certificate where the key goes
      });
      await rejects(
        SSLConfig.fromDirectory(badKey),
        join(badKey, "ssl", "server.key"),
        "not a PEM private key",
      );
      const brokenPem = await site({
        "server.crt":
          "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        "server.key": material.serverKey,
      });
      await rejects(
        SSLConfig.fromDirectory(brokenPem),
        join(brokenPem, "ssl", "server.crt"),
        "not a valid PEM certificate",
      );
    });

    await t.step(
      "production: server.crt and server.key as they are, ca.crt ignored",
      async () => {
        const dir = await site({
          "server.crt": material.serverCrt,
          "server.key": material.serverKey,
          "ca.crt": material.caCrt,
        });
        const tls = await SSLConfig.fromDirectory(dir);
        assert.ok(tls);
        assert.equal(tls.cert, material.serverCrt);
        assert.equal(tls.key, material.serverKey);
        assert.equal(tls.certFile, join(dir, "ssl", "server.crt"));
        assert.equal(tls.keyFile, join(dir, "ssl", "server.key"));
        assert.equal(tls.ca, undefined);
        assert.equal(tls.caFile, undefined);
        assert.ok(!("ca" in tls) && !("caFile" in tls));
      },
    );

    await t.step("an RSA 2048 pair is accepted", async () => {
      const dir = await site({
        "server.crt": material.rsaCrt,
        "server.key": material.rsaKey,
      });
      assert.ok(await SSLConfig.fromDirectory(dir));
    });

    await t.step(
      "dev mode: ca.crt is appended to the served chain and exposed",
      async () => {
        const dir = await site({
          "server.crt": material.serverCrt,
          "server.key": material.serverKey,
          "ca.crt": material.caCrt,
        });
        const tls = await SSLConfig.fromDirectory(dir, { devMode: true });
        assert.ok(tls);
        assert.equal(tls.ca, material.caCrt);
        assert.equal(tls.caFile, join(dir, "ssl", "ca.crt"));
        assert.ok(tls.cert.startsWith(material.serverCrt.trimEnd()));
        assert.ok(tls.cert.trimEnd().endsWith(material.caCrt.trimEnd()));
        assert.equal(tls.cert.match(/-----BEGIN CERTIFICATE-----/g)?.length, 2);
      },
    );

    await t.step(
      "dev mode without ca.crt: the server certificate alone",
      async () => {
        const dir = await site({
          "server.crt": material.serverCrt,
          "server.key": material.serverKey,
        });
        const tls = await SSLConfig.fromDirectory(dir, { devMode: true });
        assert.ok(tls);
        assert.equal(tls.cert, material.serverCrt);
        assert.equal(tls.ca, undefined);
      },
    );

    await t.step("dev mode with a ca.crt that is not PEM: named", async () => {
      const dir = await site({
        "server.crt": material.serverCrt,
        "server.key": material.serverKey,
        "ca.crt": "garbage",
      });
      await rejects(
        SSLConfig.fromDirectory(dir, { devMode: true }),
        join(dir, "ssl", "ca.crt"),
      );
    });

    await t.step("production warns when SSLKEYLOGFILE is set", async () => {
      const dir = await site({
        "server.crt": material.serverCrt,
        "server.key": material.serverKey,
      });
      const { lines } = await captureLog(() =>
        SSLConfig.fromDirectory(dir, { keyLogFile: join(root, "keys.log") })
      );
      assert.equal(lines.length, 1);
      assert.match(lines[0] ?? "", /^warn: SSLKEYLOGFILE is set/);
      const quiet = await captureLog(() => SSLConfig.fromDirectory(dir));
      assert.deepEqual(quiet.lines, []);
    });

    await t.step(
      "Deno.serve with the config answers HTTPS to a client trusting the CA",
      async () => {
        const dir = await site({
          "server.crt": material.serverCrt,
          "server.key": material.serverKey,
        });
        const tls = await SSLConfig.fromDirectory(dir);
        assert.ok(tls);
        await serveOnce(
          tls,
          material.caCrt,
          () => new Response("hello over TLS"),
          async (url, client) => {
            const response = await fetch(`${url}/health`, { client });
            assert.equal(response.status, 200);
            assert.equal(await response.text(), "hello over TLS");
            // Without the CA the same server is not trusted.
            await assert.rejects(fetch(`${url}/health`));
          },
        );
      },
    );

    await t.step(
      "dev mode chain over HTTPS, behind AuthMiddleware (401 with HSTS)",
      async () => {
        const dir = await site({
          "server.crt": material.serverCrt,
          "server.key": material.serverKey,
          "ca.crt": material.caCrt,
        });
        const tls = await SSLConfig.fromDirectory(dir, { devMode: true });
        assert.ok(tls?.ca);
        const auth = new AuthMiddleware({
          secret: "ssl-test-secret-".repeat(5),
          issuer: "https://idp.example.test",
        });
        await captureLog(() =>
          serveOnce(
            tls,
            tls.ca ?? "",
            auth.wrap(() => new Response("protected")),
            async (url, client) => {
              const response = await fetch(`${url}/models`, { client });
              assert.equal(response.status, 401);
              assert.equal(await response.text(), "Unauthorized");
              assert.equal(response.headers.get("www-authenticate"), "Bearer");
              assert.match(
                response.headers.get("strict-transport-security") ?? "",
                /max-age=/,
              );
            },
          )
        );
      },
    );
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("SSLConfig's serial is whole bytes of hex, as openssl prints it, also with a leading zero nibble", async () => {
  const dir = await Deno.makeTempDir({ prefix: "serve-serial-" });
  try {
    await Deno.mkdir(join(dir, "ssl"));
    const run = (args: string[]) =>
      new Deno.Command("/usr/bin/openssl", {
        args,
        cwd: join(dir, "ssl"),
        stdout: "piped",
        stderr: "piped",
      }).output();
    // 0x0c… : a serial whose first byte is below 0x10.
    const made = await run([
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-keyout",
      "server.key",
      "-out",
      "server.crt",
      "-days",
      "2",
      "-subj",
      "/CN=localhost",
      "-set_serial",
      "0x0c3ce1cf2e612348",
    ]);
    assert.equal(made.code, 0, new TextDecoder().decode(made.stderr));
    const printed = await run([
      "x509",
      "-in",
      "server.crt",
      "-noout",
      "-serial",
    ]);
    const expected = new TextDecoder().decode(printed.stdout).trim()
      .replace(/^serial=/, "").toLowerCase();
    assert.equal(expected, "0c3ce1cf2e612348");
    const tls = await SSLConfig.fromDirectory(dir, { devMode: true });
    assert.equal(tls?.serial, expected);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
