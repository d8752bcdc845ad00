/**
 * The security headers: set in one place, on every answer of a wrapped
 * handler (a 500 included) and on AuthMiddleware's own 401s; HSTS over HTTPS
 * only; a synchronous handler stays synchronous. One end-to-end run of the
 * launcher checks 200, 401, 404 and 405 on the wire.
 */
import assert from "node:assert/strict";
import {
  captureLog,
  fakeBin,
  freePorts,
  Launcher,
  makeRoot,
  pathWith,
  siteArgs,
} from "../support/helpers.ts";
import { AuthMiddleware } from "../../src/web.ts";
import { withSecurityHeaders } from "../../src/web/security_headers.ts";

const EXPECTED: Record<string, string> = {
  "x-content-type-options": "nosniff",
  "cache-control": "no-store",
  "content-security-policy": "default-src 'none'; frame-ancestors 'none'",
  "x-frame-options": "DENY",
};

function assertSecure(headers: Headers, https: boolean, what = ""): void {
  for (const [name, value] of Object.entries(EXPECTED)) {
    assert.equal(headers.get(name), value, `${what} ${name}`);
  }
  assert.equal(
    headers.get("strict-transport-security"),
    https ? "max-age=31536000" : null,
    `${what} HSTS`,
  );
}

Deno.test("withSecurityHeaders keeps a synchronous handler synchronous and sets every header", () => {
  const handler = withSecurityHeaders(
    () => Response.json({ status: "ok" }),
    { https: false },
  );
  const response = handler(new Request("http://localhost/health"));
  assert.ok(response instanceof Response, "no promise for a sync handler");
  assertSecure(response.headers, false);
  assert.equal(response.headers.get("content-type"), "application/json");
});

Deno.test("withSecurityHeaders adds HSTS over HTTPS, on async answers too", async () => {
  const handler = withSecurityHeaders(
    () => Promise.resolve(new Response("x", { status: 404 })),
    { https: true },
  );
  const response = await handler(new Request("https://localhost/nowhere"));
  assert.equal(response.status, 404);
  assertSecure(response.headers, true);
  await response.body?.cancel();
});

Deno.test("withSecurityHeaders copies an answer whose headers are immutable", async () => {
  const handler = withSecurityHeaders(
    () => Response.redirect("http://localhost/elsewhere", 307),
    { https: false },
  );
  const response = await handler(new Request("http://localhost/"));
  assert.equal(response.status, 307);
  assert.equal(response.headers.get("location"), "http://localhost/elsewhere");
  assertSecure(response.headers, false);
});

Deno.test("an exception becomes a 500 with the headers and one log line without the query", async () => {
  for (
    const thrower of [
      function sync(): Response {
        throw new Error("boom\nsecond line");
      },
      function async(): Promise<Response> {
        return Promise.reject(new TypeError("bust"));
      },
    ]
  ) {
    const handler = withSecurityHeaders(thrower, { https: true });
    const { result, lines } = await captureLog(() =>
      handler(new Request("https://localhost/models?auth=secret-token"))
    );
    assert.equal(result.status, 500);
    assertSecure(result.headers, true);
    assert.equal(await result.text(), "Internal Server Error");
    assert.equal(lines.length, 1);
    assert.match(lines[0] ?? "", /^error: 500 GET \/models: (Error|TypeError)/);
    assert.ok(!(lines[0] ?? "").includes("secret-token"));
    assert.ok(!(lines[0] ?? "").includes("\n"));
  }
});

Deno.test("AuthMiddleware used on its own sets the headers on its 401s, HSTS over HTTPS", async () => {
  const auth = new AuthMiddleware({
    secret: "headers-test-secret-".repeat(4),
    issuer: "https://idp.example",
  });
  const handler = auth.wrap(() => new Response("ok"));
  for (const https of [false, true]) {
    const { result } = await captureLog(() =>
      handler(new Request(`${https ? "https" : "http"}://localhost/models`))
    );
    assert.equal(result.status, 401);
    assertSecure(result.headers, https, https ? "https" : "http");
    assert.equal(result.headers.get("www-authenticate"), "Bearer");
    await result.body?.cancel();
  }
});

Deno.test("the launcher's 200, 401, 404 and 405 answers all carry the security headers", async () => {
  const root = await makeRoot();
  const bin = await fakeBin();
  const port = freePorts(1);
  try {
    for (const mode of ["development", "production"]) {
      await using launcher = new Launcher(["alpha", ...siteArgs(port, root)], {
        PATH: pathWith(bin),
        NUCLEUS_MODE: mode,
        IDP_SECRET: "e2e-headers-secret-".repeat(4),
        IDP_ISSUER: "https://idp.example",
      });
      await launcher.ready();
      const cases: [string, RequestInit, number][] = mode === "development"
        ? [
          ["/health", {}, 200],
          ["/models", { method: "HEAD" }, 200],
          ["/nowhere", {}, 404],
          ["/health", { method: "POST" }, 405],
        ]
        : [["/health", {}, 401], ["/nowhere", {}, 401]];
      for (const [path, init, status] of cases) {
        const response = await fetch(`http://127.0.0.1:${port}${path}`, init);
        await response.body?.cancel();
        assert.equal(response.status, status, `${mode} ${path}`);
        assertSecure(response.headers, false, `${mode} ${path}`);
      }
      await launcher.stop();
    }
  } finally {
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});
