/**
 * The verified-token cache, alone and inside AuthMiddleware: a hit skips the
 * HMAC (counted by wrapping `crypto.subtle.verify`), but never the `exp` and
 * `nbf` checks, and nothing refused is ever remembered.
 */
import assert from "node:assert/strict";
import { SignJWT } from "jose";
import { captureLog } from "../support/helpers.ts";
import { AuthMiddleware } from "../../src/web.ts";
import { TokenCache } from "../../src/web/token_cache.ts";
import { TokenError } from "../../src/web/jwt.ts";

const SECRET =
  "token-cache-test-secret-long-enough-for-hs512-0123456789abcdefghijklmn";
const ISSUER = "https://idp.example.test";

function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

function mint(claims: Record<string, unknown> = {}): Promise<string> {
  const now = nowSeconds();
  return new SignJWT({ iss: ISSUER, aud: "nexus", exp: now + 300, ...claims })
    .setProtectedHeader({ alg: "HS512" })
    .sign(new TextEncoder().encode(SECRET));
}

/** Counts HMAC verifications while `run` runs. */
async function countVerifies<T>(
  run: () => Promise<T>,
): Promise<{ result: T; verifies: number }> {
  const subtle = crypto.subtle;
  const original = subtle.verify;
  let verifies = 0;
  subtle.verify = function (
    this: SubtleCrypto,
    ...args: Parameters<typeof original>
  ): ReturnType<typeof original> {
    verifies++;
    return Reflect.apply(original, this, args);
  } as typeof original;
  try {
    return { result: await run(), verifies };
  } finally {
    subtle.verify = original;
  }
}

/** Runs `run` with `Date.now()` moved by `seconds`. */
async function shiftedClock<T>(seconds: number, run: () => Promise<T>) {
  const original = Date.now;
  Date.now = () => original() + seconds * 1000;
  try {
    return await run();
  } finally {
    Date.now = original;
  }
}

function app(auth: AuthMiddleware) {
  let calls = 0;
  const handler = auth.wrap(function protectedRoute(): Response {
    calls++;
    return new Response("protected");
  });
  return {
    get calls(): number {
      return calls;
    },
    async status(token: string): Promise<number> {
      const { result } = await captureLog(() =>
        handler(
          new Request("http://localhost/health", {
            headers: { authorization: `Bearer ${token}` },
          }),
        )
      );
      await result.body?.cancel();
      return result.status;
    },
    answer(token: string): Response | Promise<Response> {
      return handler(
        new Request("http://localhost/health", {
          headers: { authorization: `Bearer ${token}` },
        }),
      );
    },
  };
}

function middleware(): AuthMiddleware {
  return new AuthMiddleware({ secret: SECRET, issuer: ISSUER });
}

Deno.test("a reused valid token is verified once, then answered from the cache without a promise", async () => {
  const a = app(middleware());
  const token = await mint();
  const { verifies } = await countVerifies(async () => {
    assert.equal(await a.status(token), 200);
    const hit = a.answer(token);
    assert.ok(hit instanceof Response, "a hit answers synchronously");
    assert.equal(hit.status, 200);
    await hit.body?.cancel();
    assert.equal(await a.status(token), 200);
  });
  assert.equal(verifies, 1);
  assert.equal(a.calls, 3);
});

Deno.test("a cached token that expires is refused at once, counted as expired, and dropped", async () => {
  const auth = middleware();
  const a = app(auth);
  const token = await mint({ exp: nowSeconds() + 60 });
  assert.equal(await a.status(token), 200);
  const later = await shiftedClock(61, () => a.status(token));
  assert.equal(later, 401, "expired while cached");
  assert.equal(auth.failures.expired, 1);
  // Dropped: back on the real clock it is verified in full again.
  const { verifies } = await countVerifies(() => a.status(token));
  assert.equal(verifies, 1);
});

Deno.test("a cached token is refused when the clock moves before its nbf, with the configured leeway and no more", async () => {
  const auth = new AuthMiddleware({
    secret: SECRET,
    issuer: ISSUER,
    leewaySeconds: 5,
  });
  const a = app(auth);
  const now = nowSeconds();
  const token = await mint({ nbf: now, exp: now + 300 });
  assert.equal(await a.status(token), 200);
  assert.equal(await shiftedClock(-4, () => a.status(token)), 200);
  assert.equal(await shiftedClock(-7, () => a.status(token)), 401);
  assert.equal(auth.failures.claims, 1);
  const expiring = await mint({ exp: now + 30 });
  assert.equal(await a.status(expiring), 200);
  assert.equal(await shiftedClock(34, () => a.status(expiring)), 200);
  assert.equal(await shiftedClock(36, () => a.status(expiring)), 401);
  assert.equal(auth.failures.expired, 1);
});

Deno.test("a token failing a check is never cached: each try is verified again", async () => {
  const auth = middleware();
  const a = app(auth);
  for (
    const token of [
      await mint({ aud: "someone-else" }),
      await mint({ iss: "https://evil.example" }),
      await mint({ iat: nowSeconds() + 120 }),
    ]
  ) {
    const { verifies } = await countVerifies(async () => {
      assert.equal(await a.status(token), 401);
      assert.equal(await a.status(token), 401);
    });
    assert.equal(verifies, 2, "a refused token was remembered");
  }
  assert.equal(auth.failures.claims, 6);
  assert.equal(a.calls, 0);
});

Deno.test("siblings of a cached token (tampered signature or payload) are still refused", async () => {
  const auth = middleware();
  const a = app(auth);
  const token = await mint();
  assert.equal(await a.status(token), 200);
  const [header, payload, signature] = token.split(".") as [
    string,
    string,
    string,
  ];
  const last = signature.at(-2) === "A" ? "B" : "A";
  const tamperedSignature = `${header}.${payload}.${
    signature.slice(0, -2)
  }${last}${signature.at(-1)}`;
  const otherPayload = btoa(JSON.stringify({
    iss: ISSUER,
    aud: "nexus",
    exp: nowSeconds() + 9999,
  })).replace(/=+$/, "").replaceAll("+", "-").replaceAll("/", "_");
  const tamperedPayload = `${header}.${otherPayload}.${signature}`;
  assert.equal(await a.status(tamperedSignature), 401);
  assert.equal(await a.status(tamperedPayload), 401);
  assert.equal(await a.status(`${token}A`), 401);
  assert.equal(auth.failures.signature, 3);
  assert.equal(await a.status(token), 200, "the original still passes");
});

Deno.test("TokenCache keeps at most its capacity, least recently used out", () => {
  const cache = new TokenCache({ capacity: 3, leewaySeconds: 0 });
  const times = { exp: 2_000, nbf: undefined };
  for (const t of ["a", "b", "c"]) cache.add(t, times);
  assert.equal(cache.check("a", 1_000), true); // a is now the most recent
  cache.add("d", times); // b, the least recently used, goes
  assert.equal(cache.size, 3);
  assert.equal(cache.check("b", 1_000), false);
  for (const t of ["a", "c", "d"]) assert.equal(cache.check(t, 1_000), true);
  for (let i = 0; i < 100; i++) cache.add(`t${i}`, times);
  assert.equal(cache.size, 3);
  assert.throws(
    () => new TokenCache({ capacity: 0, leewaySeconds: 0 }),
    RangeError,
  );
});

Deno.test("TokenCache refuses exp equal to now, like the verifier, and drops the entry", () => {
  const cache = new TokenCache({ capacity: 1024, leewaySeconds: 0 });
  cache.add("t", { exp: 1_000, nbf: 900 });
  assert.equal(cache.check("t", 999.5), true);
  assert.throws(
    () => cache.check("t", 1_000),
    (e: unknown) => e instanceof TokenError && e.kind === "expired",
  );
  assert.equal(cache.size, 0);
  assert.equal(cache.check("t", 999), false);
  cache.add("n", { exp: 1_000, nbf: 900 });
  assert.throws(
    () => cache.check("n", 899),
    (e: unknown) => e instanceof TokenError && e.kind === "claims",
  );
  assert.equal(cache.size, 0);
});

Deno.test("AuthMiddleware refuses a tokenCacheSize that is not an integer >= 1", () => {
  for (const tokenCacheSize of [0, -1, 1.5, Number.NaN]) {
    assert.throws(
      () =>
        new AuthMiddleware({ secret: SECRET, issuer: ISSUER, tokenCacheSize }),
      /tokenCacheSize must be an integer >= 1/,
    );
  }
});
