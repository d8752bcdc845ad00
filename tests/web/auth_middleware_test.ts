/**
 * AuthMiddleware as a middleware, structured like hono's JWT middleware
 * tests: its construction, one group per credential source (the
 * Authorization header, `auth=` on websocket upgrades), what its log line
 * says, secret rotation, and a real websocket end to end. Every refusal checks
 * the whole answer (tests/support/auth_probe.ts). The token checks themselves,
 * case by case, are in token_checks_test.ts.
 */
import assert from "node:assert/strict";
import { captureLog } from "../support/helpers.ts";
import { AuthMiddleware } from "../../src/web.ts";
import { AuthConfigError } from "../../src/web/auth_middleware.ts";
import {
  assertAccepted,
  assertUnauthorized,
  AUTH,
  bearer,
  ISSUER,
  mint,
  nowSeconds,
  probe,
  SECRET,
  textEncoder,
  upgrade,
} from "../support/auth_probe.ts";

// ---------------------------------------------------------------------------
// Construction

Deno.test("AuthMiddleware refuses to start without a secret, naming IDP_SECRET", () => {
  assert.throws(
    () => new AuthMiddleware({ secret: "", issuer: ISSUER }),
    (error: unknown) =>
      error instanceof AuthConfigError && error instanceof TypeError &&
      error.name === "AuthConfigError" && /IDP_SECRET/.test(error.message),
  );
  assert.throws(
    () =>
      new AuthMiddleware(
        { issuer: ISSUER } as unknown as { secret: string; issuer: string },
      ),
    /IDP_SECRET/,
  );
});

Deno.test("AuthMiddleware refuses to start without an issuer, naming IDP_ISSUER", () => {
  assert.throws(
    () => new AuthMiddleware({ secret: SECRET, issuer: "" }),
    (error: unknown) =>
      error instanceof AuthConfigError && /IDP_ISSUER/.test(error.message),
  );
  assert.throws(
    () =>
      new AuthMiddleware(
        { secret: SECRET } as unknown as { secret: string; issuer: string },
      ),
    /IDP_ISSUER/,
  );
});

Deno.test("AuthMiddleware refuses an empty audience and a negative or infinite leeway", () => {
  assert.throws(
    () => new AuthMiddleware({ secret: SECRET, issuer: ISSUER, audience: "" }),
    AuthConfigError,
  );
  for (const leewaySeconds of [-1, Infinity, Number.NaN]) {
    assert.throws(
      () =>
        new AuthMiddleware({ secret: SECRET, issuer: ISSUER, leewaySeconds }),
      AuthConfigError,
    );
  }
});

Deno.test("AuthMiddleware warns when the secret is shorter than 64 bytes", async () => {
  const { lines } = await captureLog(() =>
    new AuthMiddleware({ secret: "short-secret", issuer: ISSUER })
  );
  assert.equal(lines.length, 1);
  assert.match(lines[0] ?? "", /^warn: .*IDP_SECRET.*HS512.*64 bytes/);
  assert.ok(!(lines[0] ?? "").includes("short-secret"));
  const quiet = await captureLog(() =>
    new AuthMiddleware({ secret: SECRET, issuer: ISSUER })
  );
  assert.deepEqual(quiet.lines, []);
});

Deno.test("AuthMiddleware.development() passes every request through unchanged", async () => {
  const { result: auth } = await captureLog(() => AuthMiddleware.development());
  assert.equal(auth.enabled, false);
  assert.equal(AUTH.enabled, true);
  function handler(): Response {
    return new Response("protected");
  }
  assert.equal(auth.wrap(handler), handler);
  await assertAccepted(new Request("http://localhost/models"), auth);
});

Deno.test("wrap() returns a named handler", () => {
  const wrapped = AUTH.wrap(() => new Response("x"));
  assert.equal(wrapped.name, "authenticated");
});

Deno.test("the key is imported once, when the middleware is created, not per request", async () => {
  const subtle = crypto.subtle;
  const original = subtle.importKey;
  let imports = 0;
  const counting = function (
    this: SubtleCrypto,
    ...args: Parameters<typeof original>
  ): ReturnType<typeof original> {
    imports++;
    return Reflect.apply(original, this, args);
  } as typeof original;
  const token = await mint(); // jose imports a key to sign: not counted
  subtle.importKey = counting;
  try {
    const auth = new AuthMiddleware({ secret: SECRET, issuer: ISSUER });
    assert.equal(imports, 1);
    await assertAccepted(bearer(token), auth);
    await assertAccepted(bearer(token), auth);
    await assertUnauthorized(bearer(`${token}x`), { auth });
    assert.equal(imports, 1);
  } finally {
    subtle.importKey = original;
  }
});

// ---------------------------------------------------------------------------
// Credential source: Authorization header

Deno.test("Authorization: Bearer", async (t) => {
  await t.step("accepts a valid HS512 token", async () => {
    await assertAccepted(bearer(await mint()));
  });

  for (const scheme of ["Bearer", "bearer", "BEARER", "bEaReR"]) {
    await t.step(`accepts the scheme spelled ${scheme}`, async () => {
      await assertAccepted(bearer(await mint(), scheme));
    });
  }

  await t.step("accepts several spaces after the scheme", async () => {
    await assertAccepted(bearer(await mint(), "Bearer   "));
  });

  await t.step("accepts aud as an array containing nexus", async () => {
    await assertAccepted(bearer(await mint({ aud: ["x", "nexus"] })));
  });

  await t.step(
    "the check runs before any route (an unknown path is 401, not 404)",
    async () => {
      await assertUnauthorized(new Request("http://localhost/no/such/route"), {
        reason: /GET \/no\/such\/route/,
      });
    },
  );

  await t.step("case 1: no token at all", async () => {
    await assertUnauthorized(new Request("http://localhost/models"), {
      reason: /no Authorization header/,
    });
  });

  await t.step("case 1: Bearer with nothing after it", async () => {
    await assertUnauthorized(
      new Request("http://localhost/models", {
        headers: { authorization: "Bearer" },
      }),
      { reason: /without a token/ },
    );
    await assertUnauthorized(
      new Request("http://localhost/models", {
        headers: { authorization: "Bearer    " },
      }),
      { reason: /without a token/ },
    );
  });

  await t.step("case 1: another scheme (Basic)", async () => {
    const token = await mint();
    await assertUnauthorized(bearer(token, "Basic"), {
      token,
      reason: /scheme is not Bearer/,
    });
    await assertUnauthorized(
      new Request("http://localhost/models", {
        headers: { authorization: `Basic ${btoa("user:password")}` },
      }),
      { reason: /scheme is not Bearer/ },
    );
  });

  await t.step("a tab instead of a space after the scheme", async () => {
    const token = await mint();
    await assertUnauthorized(
      new Request("http://localhost/models", {
        headers: { authorization: `Bearer\t${token}` },
      }),
      { token, reason: /malformed Bearer/ },
    );
  });

  await t.step("case 2: several Authorization headers", async () => {
    const token = await mint();
    const headers = new Headers();
    headers.append("authorization", `Bearer ${token}`);
    headers.append("authorization", `Bearer ${token}`);
    await assertUnauthorized(
      new Request("http://localhost/models", { headers }),
      { token, reason: /several Authorization headers/ },
    );
  });

  await t.step("case 3: a token both in the header and in auth=", async () => {
    const token = await mint();
    await assertUnauthorized(
      upgrade(`?auth=${token}`, { authorization: `Bearer ${token}` }),
      { token, reason: /both/ },
    );
  });

  await t.step(
    "an auth= query parameter on a plain HTTP request, even valid",
    async () => {
      const token = await mint();
      await assertUnauthorized(
        new Request(`http://localhost/models?auth=${token}`),
        { token, reason: /auth query parameter on a plain HTTP request/ },
      );
      await assertUnauthorized(
        new Request(`http://localhost/models?auth=${token}`, {
          headers: { authorization: `Bearer ${token}` },
        }),
        { token },
      );
    },
  );
});

// ---------------------------------------------------------------------------
// Credential source: auth= on websocket upgrades

Deno.test("websocket upgrade: auth= query parameter", async (t) => {
  await t.step("accepts a valid token in auth=", async () => {
    await assertAccepted(upgrade(`?auth=${await mint()}`));
  });

  await t.step("recognises the upgrade header in any case", async () => {
    const request = new Request(`http://localhost/ws?auth=${await mint()}`, {
      headers: { upgrade: "WebSocket", connection: "upgrade" },
    });
    await assertAccepted(request);
  });

  await t.step("refuses an upgrade without auth=", async () => {
    await assertUnauthorized(upgrade(""), {
      reason: /without the auth query parameter/,
    });
  });

  await t.step(
    "refuses an upgrade carrying the token only in the header",
    async () => {
      const token = await mint();
      await assertUnauthorized(
        upgrade("", { authorization: `Bearer ${token}` }),
        {
          token,
          reason: /without the auth query parameter/,
        },
      );
    },
  );

  await t.step(
    "case 16: refuses an empty auth= (the empty string)",
    async () => {
      await assertUnauthorized(upgrade("?auth="), {
        reason: /empty auth query parameter/,
      });
    },
  );

  await t.step("refuses several auth= parameters", async () => {
    const token = await mint();
    await assertUnauthorized(upgrade(`?auth=${token}&auth=${token}`), {
      token,
      reason: /several auth query parameters/,
    });
  });

  await t.step(
    "refuses a bad token in auth= and never logs the query",
    async () => {
      const token = await mint({ iss: "https://evil.example" });
      const warning = await assertUnauthorized(
        upgrade(`?x=1&auth=${token}`),
        { token, reason: /iss/ },
      );
      assert.match(warning, /GET \/ws:/);
      assert.ok(!warning.includes("?"), warning);
    },
  );
});

Deno.test("the log line names method, path without query, peer and reason, never the token", async () => {
  const token = await mint({ exp: nowSeconds() - 60 });
  const info = {
    remoteAddr: { transport: "tcp", hostname: "192.0.2.7", port: 40123 },
    completed: Promise.resolve(),
  } as Deno.ServeHandlerInfo;
  const warning = await assertUnauthorized(
    new Request("http://localhost/models?verbose=1", {
      method: "POST",
      headers: { authorization: `Bearer ${token}` },
    }),
    { token, info },
  );
  assert.match(
    warning,
    /^warn: 401 POST \/models from 192\.0\.2\.7:40123: .*exp/,
  );
  assert.ok(!warning.includes("verbose"), warning);
});

Deno.test("a 401 over HTTPS carries Strict-Transport-Security", async () => {
  const app = probe();
  const { result: response } = await captureLog(() =>
    app.handler(new Request("https://localhost/models"))
  );
  assert.equal(response.status, 401);
  assert.match(
    response.headers.get("strict-transport-security") ?? "",
    /max-age=\d+/,
  );
  await response.body?.cancel();
});

// ---------------------------------------------------------------------------
// A real websocket, end to end

async function readHead(conn: Deno.Conn): Promise<string> {
  const decoder = new TextDecoder();
  const buffer = new Uint8Array(4096);
  let text = "";
  while (!text.includes("\r\n\r\n")) {
    const read = await conn.read(buffer);
    if (read === null) break;
    text += decoder.decode(buffer.subarray(0, read));
  }
  return text;
}

Deno.test("websocket end to end: a valid auth= opens and talks, a bad one gets 401 before the upgrade", async () => {
  let handlerExecuted = false;
  const claimsBefore = AUTH.failures.claims;
  const handler = AUTH.wrap(function websocketRoute(req: Request): Response {
    handlerExecuted = true;
    const { socket, response } = Deno.upgradeWebSocket(req);
    socket.onmessage = (event) => socket.send(`echo: ${event.data}`);
    return response;
  });
  const { result: warnings } = await captureLog(async () => {
    await using server = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen: () => {} },
      handler,
    );
    const port = server.addr.port;

    // Valid token: the socket opens and a message goes both ways.
    const token = await mint();
    const socket = new WebSocket(`ws://127.0.0.1:${port}/ws?auth=${token}`);
    const opened = Promise.withResolvers<void>();
    const answered = Promise.withResolvers<string>();
    const closed = Promise.withResolvers<void>();
    socket.onopen = () => opened.resolve();
    socket.onerror = () => opened.reject(new Error("websocket failed"));
    socket.onmessage = (event) => answered.resolve(String(event.data));
    socket.onclose = () => closed.resolve();
    await opened.promise;
    socket.send("ping");
    assert.equal(await answered.promise, "echo: ping");
    assert.equal(handlerExecuted, true);
    socket.close();
    await closed.promise;

    // Bad token: the upgrade answer is a 401, and the handler never runs.
    handlerExecuted = false;
    const badToken = await mint({ aud: "someone-else" });
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    try {
      await conn.write(textEncoder.encode(
        `GET /ws?auth=${badToken} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n` +
          "Upgrade: websocket\r\nConnection: Upgrade\r\n" +
          "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
          "Sec-WebSocket-Version: 13\r\n\r\n",
      ));
      const head = (await readHead(conn)).toLowerCase();
      assert.match(head, /^http\/1\.1 401 /);
      assert.match(head, /\r\nwww-authenticate: bearer\r\n/);
      assert.match(head, /\r\ncontent-type: text\/plain\r\n/);
      assert.ok(!head.includes("sec-websocket-accept"));
    } finally {
      conn.close();
    }

    // A browser-style client with the bad token never opens.
    const refused = new WebSocket(`ws://127.0.0.1:${port}/ws?auth=${badToken}`);
    const failed = Promise.withResolvers<boolean>();
    refused.onopen = () => failed.resolve(false);
    refused.onerror = () => {};
    refused.onclose = () => failed.resolve(true);
    assert.equal(await failed.promise, true);
    assert.equal(handlerExecuted, false);
    return { token, badToken };
  }).then(({ result, lines }) => {
    for (const line of lines) {
      assert.ok(
        !line.includes(result.token) && !line.includes(result.badToken),
      );
      assert.ok(!line.includes("auth="), line);
    }
    return {
      result: lines.filter((line) => line.startsWith("warn: 401 GET /ws")),
    };
  });
  // Two refusals for the same reason within 10 s: both counted, one logged.
  assert.equal(AUTH.failures.claims - claimsBefore, 2);
  assert.equal(warnings.length, 1);
  assert.match(warnings[0] ?? "", /from 127\.0\.0\.1:\d+: .*aud/);
});

// ---------------------------------------------------------------------------
// Secret rotation (AuthMiddleware.rotateSecret), without sockets

const OLD = "old-secret-".repeat(7);
const NEW = "new-secret-".repeat(7);

/** The status `handler` answers a bearer `token` with (the body discarded). */
async function status(
  handler: (req: Request) => Response | Promise<Response>,
  token: string,
): Promise<number> {
  const response = await handler(bearer(token));
  await response.body?.cancel();
  return response.status;
}

Deno.test("rotateSecret: tokens of the old secret are refused at once, even ones served before; new ones pass", async () => {
  const auth = new AuthMiddleware({ secret: OLD, issuer: ISSUER });
  let ran = 0;
  const handler = auth.wrap(() => {
    ran++;
    return new Response("ok");
  });
  const old = await mint({}, OLD);
  assert.equal(await status(handler, old), 200);
  assert.equal(await status(handler, old), 200, "used again");
  auth.rotateSecret(NEW);
  assert.equal(await status(handler, old), 401);
  assert.equal(await status(handler, await mint({}, NEW)), 200);
  assert.equal(ran, 3, "the handler never ran for the refused token");
  assert.equal(auth.failures.signature, 1);
});

Deno.test("rotateSecret refuses an empty secret and the development pass-through", () => {
  const auth = new AuthMiddleware({ secret: OLD, issuer: ISSUER });
  assert.throws(() => auth.rotateSecret(""), AuthConfigError);
  assert.throws(
    () => AuthMiddleware.development().rotateSecret(NEW),
    /Cannot rotate the JWT secret: authentication is off/,
  );
});
