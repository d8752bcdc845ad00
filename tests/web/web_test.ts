/**
 * AuthMiddleware, structured like hono's JWT middleware tests: one group per
 * credential source, one for algorithm confusion, one per family of bad
 * tokens. Every refusal checks the whole answer (401, `text/plain`,
 * `Unauthorized`, `WWW-Authenticate: Bearer`), that the protected handler
 * never ran, and that the log line names the reason but never the token.
 * The case numbers are those of docs/security.md, "Token checks, case by case".
 */

import assert from "node:assert/strict";
import { SignJWT } from "jose";
import { captureLog } from "../support/helpers.ts";
import { AuthConfigError, AuthMiddleware } from "../../src/web.ts";
import type { Handler } from "../../src/web.ts";
import { base64url, encodeJwt, hmac, signJwt } from "../support/jwt_encoder.ts";
import type { Part } from "../support/jwt_encoder.ts";

const SECRET =
  "web-test-secret-that-is-long-enough-for-hs512-0123456789abcdefghijklmnop";
const ATTACKER_SECRET =
  "attacker-chosen-secret-0123456789abcdef0123456789abcdef01";
const ISSUER = "https://idp.example.test/realms/main";
const AUTH = new AuthMiddleware({ secret: SECRET, issuer: ISSUER });

// ---------------------------------------------------------------------------
// Log capture

const textEncoder = new TextEncoder();

// ---------------------------------------------------------------------------
// Tokens

function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

function claims(extra: Record<string, unknown> = {}): Record<string, unknown> {
  const now = nowSeconds();
  return { iss: ISSUER, aud: "nexus", iat: now - 1, exp: now + 300, ...extra };
}

function without(
  source: Record<string, unknown>,
  name: string,
): Record<string, unknown> {
  const copy = { ...source };
  delete copy[name];
  return copy;
}

/** A valid token, minted with jose. */
function mint(extra: Record<string, unknown> = {}): Promise<string> {
  return new SignJWT(claims(extra))
    .setProtectedHeader({ alg: "HS512", typ: "JWT" })
    .sign(textEncoder.encode(SECRET));
}

/** A token signed with the real secret (HS512) by the hand encoder. */
function forge(header: unknown, payload: unknown): Promise<string> {
  return signJwt(header, payload, SECRET);
}

function forgeParts(header: Part, payload: Part): Promise<string> {
  return encodeJwt({ header, payload, secret: SECRET });
}

// ---------------------------------------------------------------------------
// Requests and assertions

function bearer(token: string, scheme = "Bearer", path = "/models"): Request {
  return new Request(`http://localhost${path}`, {
    headers: { authorization: `${scheme} ${token}` },
  });
}

function upgrade(query: string, headers: HeadersInit = {}): Request {
  const request = new Request(`http://localhost/ws${query}`, { headers });
  request.headers.set("upgrade", "websocket");
  request.headers.set("connection", "Upgrade");
  return request;
}

interface Probe {
  readonly handlerExecuted: boolean;
  handler: Handler;
}

function probe(auth: AuthMiddleware = AUTH): Probe {
  let handlerExecuted = false;
  const handler = auth.wrap(function protectedRoute(): Response {
    handlerExecuted = true;
    return new Response("protected");
  });
  return {
    get handlerExecuted(): boolean {
      return handlerExecuted;
    },
    handler,
  };
}

interface RefusalOptions {
  /** The token the request carried: it must not reach the log. */
  token?: string;
  /** What the log line must say. */
  reason?: RegExp;
  auth?: AuthMiddleware;
  info?: Deno.ServeHandlerInfo;
}

/** Asserts the full 401 answer; returns the one warning logged. */
async function assertUnauthorized(
  request: Request,
  options: RefusalOptions = {},
): Promise<string> {
  const app = probe(options.auth);
  const { result: response, lines } = await captureLog(() =>
    app.handler(request, options.info)
  );
  assert.equal(response.status, 401);
  assert.equal(response.headers.get("content-type"), "text/plain");
  assert.equal(response.headers.get("www-authenticate"), "Bearer");
  assert.equal(await response.text(), "Unauthorized");
  assert.equal(app.handlerExecuted, false, "the protected handler ran");
  const warnings = lines.filter((line) => line.startsWith("warn: "));
  assert.equal(warnings.length, 1, `expected one warning, got ${lines}`);
  const warning = warnings[0] ?? "";
  assert.ok(!warning.includes("auth="), `URL with auth= logged: ${warning}`);
  const token = options.token;
  if (token !== undefined && token.length >= 8) {
    assert.ok(!warning.includes(token), `token logged: ${warning}`);
    for (const segment of token.split(".")) {
      if (segment.length >= 16) {
        assert.ok(!warning.includes(segment), `token part logged: ${warning}`);
      }
    }
  }
  if (options.reason) assert.match(warning, options.reason);
  return warning;
}

async function assertAccepted(
  request: Request,
  auth: AuthMiddleware = AUTH,
): Promise<void> {
  const app = probe(auth);
  const response = await app.handler(request);
  assert.equal(response.status, 200, await response.clone().text());
  assert.equal(await response.text(), "protected");
  assert.equal(app.handlerExecuted, true);
}

/** Refusal of a token sent the usual way (Authorization: Bearer). */
function refuseBearer(token: string, reason?: RegExp): Promise<string> {
  return assertUnauthorized(
    bearer(token),
    reason ? { token, reason } : { token },
  );
}

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
// Algorithm confusion

Deno.test("Algorithm confusion attack prevention", async (t) => {
  for (const alg of ["none", "None", "NONE", "nOnE"]) {
    await t.step(`case 4: alg ${alg} without a signature`, async () => {
      const token = await encodeJwt({
        header: { json: { alg, typ: "JWT" } },
        payload: { json: claims() },
      });
      await refuseBearer(token, /alg/);
    });
    await t.step(`case 4: alg ${alg} with a signature`, async () => {
      const token = await forge({ alg, typ: "JWT" }, claims());
      await refuseBearer(token, /alg/);
    });
  }

  for (
    const [alg, hash] of [["HS256", "SHA-256"], ["HS384", "SHA-384"]] as const
  ) {
    await t.step(
      `case 5: ${alg} signed with the real secret (downgrade)`,
      async () => {
        const token = await signJwt(
          { alg, typ: "JWT" },
          claims(),
          SECRET,
          hash,
        );
        await refuseBearer(token, new RegExp(`alg ${alg} not allowed`));
      },
    );
  }

  await t.step(
    "case 5: HS256 minted by jose with the real secret",
    async () => {
      const token = await new SignJWT(claims())
        .setProtectedHeader({ alg: "HS256" })
        .sign(textEncoder.encode(SECRET));
      await refuseBearer(token, /alg HS256 not allowed/);
    },
  );

  for (const alg of ["RS256", "ES256", "PS256"]) {
    await t.step(
      `case 6: ${alg} header, HMAC-signed with the secret (key confusion)`,
      async () => {
        const token = await signJwt({ alg }, claims(), SECRET, "SHA-256");
        await refuseBearer(token, new RegExp(`alg ${alg} not allowed`));
      },
    );
  }

  await t.step("case 7: alg missing", async () => {
    await refuseBearer(await forge({ typ: "JWT" }, claims()), /alg missing/);
  });

  for (const alg of [512, null, ["HS512"], { name: "HS512" }, true]) {
    await t.step(
      `case 7: alg not a string (${JSON.stringify(alg)})`,
      async () => {
        await refuseBearer(
          await forge({ alg }, claims()),
          /alg missing or not a string/,
        );
      },
    );
  }

  await t.step(
    "alg with a lookalike spelling (hs512, HS512 with a space)",
    async () => {
      await refuseBearer(await forge({ alg: "hs512" }, claims()), /alg/);
      await refuseBearer(await forge({ alg: "HS512 " }, claims()), /alg/);
    },
  );

  const keyPickers: Record<string, unknown> = {
    kid: "attacker-key",
    jku: "https://attacker.example/jwks.json",
    x5u: "https://attacker.example/cert.pem",
    jwk: { kty: "oct", k: base64url(ATTACKER_SECRET) },
    x5c: ["MIIBszCCAVmgAwIBAgIUattacker"],
  };
  for (const [name, value] of Object.entries(keyPickers)) {
    await t.step(
      `case 13: ${name} header pointing at the attacker's key is ignored`,
      async () => {
        const token = await signJwt(
          { alg: "HS512", [name]: value },
          claims(),
          ATTACKER_SECRET,
        );
        await refuseBearer(token, /signature/);
      },
    );
  }

  await t.step(
    "case 13: kid/jku/x5u/jwk/x5c do not stop a correctly signed token",
    async () => {
      await assertAccepted(
        bearer(await forge({ alg: "HS512", ...keyPickers }, claims())),
      );
    },
  );

  await t.step("case 14: crit with an unknown name", async () => {
    const token = await forge(
      { alg: "HS512", crit: ["urn:example:unknown"], "urn:example:unknown": 1 },
      claims(),
    );
    await refuseBearer(token, /crit/);
  });

  await t.step(
    "case 14: b64 false (with crit, as RFC 7797 writes it)",
    async () => {
      const token = await forge(
        { alg: "HS512", b64: false, crit: ["b64"] },
        claims(),
      );
      await refuseBearer(token, /crit|b64/);
    },
  );

  await t.step("case 14: b64 false without crit", async () => {
    await refuseBearer(
      await forge({ alg: "HS512", b64: false }, claims()),
      /b64/,
    );
  });
});

// ---------------------------------------------------------------------------
// Signatures

Deno.test("signature", async (t) => {
  const good = await mint();
  const [header, payload, signature] = good.split(".") as [
    string,
    string,
    string,
  ];

  await t.step("case 8: a bad signature (one character changed)", async () => {
    const middle = Math.floor(signature.length / 2);
    const flipped = signature[middle] === "A" ? "B" : "A";
    const bad = signature.slice(0, middle) + flipped +
      signature.slice(middle + 1);
    await refuseBearer(`${header}.${payload}.${bad}`, /signature/);
  });

  await t.step("case 8: a truncated signature", async () => {
    await refuseBearer(
      `${header}.${payload}.${signature.slice(0, 43)}`,
      /signature/,
    );
  });

  await t.step("case 8: an empty signature", async () => {
    await refuseBearer(`${header}.${payload}.`, /empty signature/);
  });

  await t.step("case 8: a payload edited after signing", async () => {
    const edited = base64url(JSON.stringify(claims({ sub: "admin" })));
    await refuseBearer(`${header}.${edited}.${signature}`, /signature/);
  });

  await t.step("case 8: a signature made with another secret", async () => {
    const other = await hmac(`${header}.${payload}`, ATTACKER_SECRET);
    await refuseBearer(`${header}.${payload}.${other}`, /signature/);
  });
});

// ---------------------------------------------------------------------------
// Claims

Deno.test("claims", async (t) => {
  const header = { alg: "HS512", typ: "JWT" };

  await t.step("case 9: exp missing", async () => {
    await refuseBearer(await forge(header, without(claims(), "exp")), /exp/);
  });

  await t.step("case 9: exp a string", async () => {
    await refuseBearer(
      await forge(header, claims({ exp: String(nowSeconds() + 300) })),
      /exp/,
    );
  });

  await t.step("case 9: exp Infinity (1e400)", async () => {
    const text = JSON.stringify(without(claims(), "exp")).replace(
      /\}$/,
      ',"exp":1e400}',
    );
    await refuseBearer(
      await forgeParts({ json: header }, { text }),
      /exp is not a finite number/,
    );
  });

  await t.step("case 9: exp in the past", async () => {
    await refuseBearer(
      await forge(header, claims({ exp: nowSeconds() - 60 })),
      /exp/,
    );
  });

  await t.step("case 9: exp equal to now", async () => {
    await refuseBearer(
      await forge(header, claims({ exp: nowSeconds() })),
      /exp/,
    );
  });

  await t.step("case 10: nbf in the future", async () => {
    await refuseBearer(
      await forge(header, claims({ nbf: nowSeconds() + 60 })),
      /nbf/,
    );
  });

  await t.step("case 10: iat in the future", async () => {
    await refuseBearer(
      await forge(header, claims({ iat: nowSeconds() + 60 })),
      /iat/,
    );
  });

  await t.step(
    "leewaySeconds tolerates small skew, and only when configured",
    async () => {
      const lenient = new AuthMiddleware({
        secret: SECRET,
        issuer: ISSUER,
        leewaySeconds: 30,
      });
      const skewed = await forge(
        header,
        claims({
          exp: nowSeconds() - 10,
          nbf: nowSeconds() + 10,
          iat: nowSeconds() + 10,
        }),
      );
      await assertAccepted(bearer(skewed), lenient);
      await refuseBearer(skewed);
      const tooSkewed = await forge(header, claims({ exp: nowSeconds() - 60 }));
      await assertUnauthorized(bearer(tooSkewed), {
        auth: lenient,
        token: tooSkewed,
      });
    },
  );

  await t.step("case 11: aud missing", async () => {
    await refuseBearer(await forge(header, without(claims(), "aud")), /aud/);
  });

  for (const aud of [[], ["x"], "Nexus", "nexus "]) {
    await t.step(`case 11: aud ${JSON.stringify(aud)}`, async () => {
      await refuseBearer(await forge(header, claims({ aud })), /aud/);
    });
  }

  await t.step('case 11: aud ["x","nexus"] is accepted', async () => {
    await assertAccepted(
      bearer(await forge(header, claims({ aud: ["x", "nexus"] }))),
    );
  });

  await t.step("audience option replaces nexus", async () => {
    const custom = new AuthMiddleware({
      secret: SECRET,
      issuer: ISSUER,
      audience: "ops",
    });
    await assertAccepted(bearer(await mint({ aud: "ops" })), custom);
    const token = await mint();
    await assertUnauthorized(bearer(token), { auth: custom, token });
  });

  for (
    const [label, iss] of [
      ["another case", ISSUER.toUpperCase()],
      ["extra spaces", ` ${ISSUER} `],
      ["a trailing space", `${ISSUER} `],
      ["another value", "https://evil.example/realms/main"],
    ] as const
  ) {
    await t.step(`case 12: iss with ${label}`, async () => {
      await refuseBearer(await forge(header, claims({ iss })), /iss/);
    });
  }

  await t.step("case 12: iss missing", async () => {
    await refuseBearer(await forge(header, without(claims(), "iss")), /iss/);
  });

  for (const payload of [[claims()], 42, null]) {
    await t.step(
      `case 17: payload ${
        JSON.stringify(payload)?.slice(0, 6)
      }… (not an object)`,
      async () => {
        await refuseBearer(await forge(header, payload), /Claims Set|object/);
      },
    );
  }
});

// ---------------------------------------------------------------------------
// Malformed tokens

Deno.test("malformed tokens", async (t) => {
  const good = await mint();
  const [header, payload, signature] = good.split(".") as [
    string,
    string,
    string,
  ];

  await t.step(
    "case 15: over 8 KiB, even though correctly signed",
    async () => {
      const big = await mint({ pad: "p".repeat(8 * 1024) });
      assert.ok(big.length > 8 * 1024);
      await refuseBearer(big, /longer than 8192 bytes/);
    },
  );

  for (const char of ["+", "/", "="]) {
    await t.step(`case 15: a "${char}" (outside base64url)`, async () => {
      await refuseBearer(
        `${header}.${payload}${char}.${signature}`,
        /outside base64url/,
      );
    });
  }

  await t.step("case 15: a space inside the token", async () => {
    await refuseBearer(
      `${header}.${payload} .${signature}`,
      /outside base64url/,
    );
  });

  await t.step("case 15: bad JSON in the header", async () => {
    const token = await forgeParts({ text: '{"alg":"HS512"' }, {
      json: claims(),
    });
    await refuseBearer(token, /header is not valid JSON/);
  });

  await t.step("case 15: bad JSON in the payload", async () => {
    const token = await forgeParts({ json: { alg: "HS512" } }, {
      text: '{"exp":',
    });
    await refuseBearer(token, /Claims Set/);
  });

  await t.step("case 15: bad UTF-8 in the header", async () => {
    const token = await forgeParts(
      { bytes: new Uint8Array([0x7b, 0xc3, 0x28, 0x7d]) },
      { json: claims() },
    );
    await refuseBearer(token, /header is not valid UTF-8/);
  });

  await t.step("case 15: bad UTF-8 in the payload", async () => {
    const text = JSON.stringify(claims({ sub: "X" }));
    const bytes = textEncoder.encode(text);
    const index = text.indexOf('"X"') + 1;
    bytes[index] = 0xff; // a lone byte that UTF-8 never uses
    const token = await forgeParts({ json: { alg: "HS512" } }, { bytes });
    await refuseBearer(token, /Claims Set/);
  });

  await t.step("case 16: 1 segment", async () => {
    await refuseBearer(header, /1 segment/);
  });

  await t.step("case 16: 2 segments", async () => {
    await refuseBearer(`${header}.${payload}`, /2 segment/);
  });

  await t.step("case 16: 4 segments", async () => {
    await refuseBearer(
      `${header}.${payload}.${signature}.${signature}`,
      /4 segment/,
    );
  });

  await t.step("case 16: 5 segments (a JWE)", async () => {
    const jweHeader = base64url(JSON.stringify({ alg: "dir", enc: "A256GCM" }));
    await refuseBearer(
      `${jweHeader}..${base64url("iv-iv-iv-iv")}.${payload}.${
        base64url("tag")
      }`,
      /JWE/,
    );
  });

  await t.step(
    "case 16: the empty string (Authorization: Bearer with nothing)",
    async () => {
      await assertUnauthorized(
        new Request("http://localhost/models", {
          headers: { authorization: "Bearer " },
        }),
        { reason: /without a token/ },
      );
    },
  );
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
