import assert from "node:assert/strict";
import { jwtVerify, SignJWT } from "jose";
import {
  importVerifyKey,
  MAX_TOKEN_BYTES,
  TokenError,
  verifyToken,
} from "../../src/web/jwt.ts";
import type { VerifyTokenOptions } from "../../src/web/jwt.ts";
import { base64url, encodeJwt, signJwt } from "../support/jwt_encoder.ts";

const SECRET =
  "jwt-test-secret-0123456789abcdef0123456789abcdef0123456789abcdef";
const ISSUER = "https://idp.example.test";
const NOW = 1_800_000_000; // a fixed clock, in seconds
const OPTIONS: VerifyTokenOptions = {
  issuer: ISSUER,
  audience: "nexus",
  leewaySeconds: 0,
  now: NOW,
};
const KEY = await importVerifyKey(SECRET);

/** Shows the gap is real: jose alone, configured strictly, accepts it. */
async function joseAloneAccepts(token: string): Promise<void> {
  await jwtVerify(token, KEY, {
    algorithms: ["HS512"],
    issuer: ISSUER,
    audience: "nexus",
    requiredClaims: ["exp"],
    currentDate: new Date(NOW * 1000),
  });
}

function claims(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { iss: ISSUER, aud: "nexus", exp: NOW + 60, ...extra };
}

async function refused(
  token: string,
  reason: RegExp,
  options: VerifyTokenOptions = OPTIONS,
): Promise<TokenError> {
  const error = await verifyToken(token, KEY, options).then(
    () => assert.fail("the token was accepted"),
    (error: unknown) => error,
  );
  assert.ok(error instanceof TokenError, `not a TokenError: ${error}`);
  assert.match(error.reason, reason);
  return error;
}

Deno.test("the test encoder writes standard unpadded base64url", () => {
  for (let length = 0; length < 40; length++) {
    const bytes = crypto.getRandomValues(new Uint8Array(length));
    assert.equal(
      base64url(bytes),
      bytes.toBase64({ alphabet: "base64url", omitPadding: true }),
    );
  }
});

Deno.test("verifyToken accepts an HS512 token from jose and from the test encoder", async () => {
  const fromJose = await new SignJWT(claims())
    .setProtectedHeader({ alg: "HS512" })
    .sign(new TextEncoder().encode(SECRET));
  const fromEncoder = await signJwt(
    { alg: "HS512", typ: "JWT" },
    claims(),
    SECRET,
  );
  for (const token of [fromJose, fromEncoder]) {
    const payload = await verifyToken(token, KEY, OPTIONS);
    assert.equal(payload.iss, ISSUER);
  }
});

Deno.test("verifyToken refuses exp equal to now and accepts exp a fraction after", async () => {
  await refused(
    await signJwt({ alg: "HS512" }, claims({ exp: NOW }), SECRET),
    /exp/,
  );
  await verifyToken(
    await signJwt({ alg: "HS512" }, claims({ exp: NOW + 0.5 }), SECRET),
    KEY,
    OPTIONS,
  );
  // jose floors the clock: at now = NOW + 0.5 it would accept exp = NOW + 0.25.
  await refused(
    await signJwt({ alg: "HS512" }, claims({ exp: NOW + 0.25 }), SECRET),
    /exp/,
    { ...OPTIONS, now: NOW + 0.5 },
  );
});

Deno.test("verifyToken applies the leeway to exp, nbf and iat, and none by default", async () => {
  const late = await signJwt(
    { alg: "HS512" },
    claims({ exp: NOW - 5 }),
    SECRET,
  );
  const early = await signJwt(
    { alg: "HS512" },
    claims({ nbf: NOW + 5 }),
    SECRET,
  );
  const ahead = await signJwt(
    { alg: "HS512" },
    claims({ iat: NOW + 5 }),
    SECRET,
  );
  await refused(late, /exp/);
  await refused(early, /nbf/);
  await refused(ahead, /iat/);
  const lenient = { ...OPTIONS, leewaySeconds: 10 };
  for (const token of [late, early, ahead]) {
    await verifyToken(token, KEY, lenient);
  }
});

Deno.test("verifyToken refuses iat in the future even though jose lets it pass", async () => {
  const token = await signJwt(
    { alg: "HS512" },
    claims({ iat: NOW + 1 }),
    SECRET,
  );
  await joseAloneAccepts(token);
  await refused(token, /issued in the future/);
});

Deno.test("verifyToken refuses exp = 1e400 (Infinity) even though jose lets it pass", async () => {
  const header = base64url(JSON.stringify({ alg: "HS512" }));
  const token = await encodeJwt({
    header: { encoded: header },
    payload: {
      text: `{"iss":${JSON.stringify(ISSUER)},"aud":"nexus","exp":1e400}`,
    },
    secret: SECRET,
  });
  await joseAloneAccepts(token);
  await refused(token, /exp is not a finite number/);
});

Deno.test("verifyToken refuses a token over the size cap before decoding it", async () => {
  // Not even valid base64url: only the size check can name it.
  const token = "!".repeat(MAX_TOKEN_BYTES + 1);
  await refused(token, /longer than 8192 bytes/);
});

Deno.test("verifyToken accepts a valid token of exactly the size cap and refuses one byte more", async () => {
  let exact: string | undefined;
  let over: string | undefined;
  for (let kid = 0; kid < 4 && (!exact || !over); kid++) {
    for (let pad = 5800; pad < 6200 && (!exact || !over); pad++) {
      const token = await signJwt(
        { alg: "HS512", kid: "k".repeat(kid) },
        claims({ pad: "p".repeat(pad) }),
        SECRET,
      );
      if (token.length === MAX_TOKEN_BYTES) exact = token;
      if (token.length === MAX_TOKEN_BYTES + 1) over = token;
    }
  }
  assert.ok(exact && over, "could not build tokens of the boundary sizes");
  await verifyToken(exact, KEY, OPTIONS);
  await refused(over, /longer than/);
});

Deno.test("verifyToken turns jose errors into TokenError and keeps the cause", async () => {
  const error = await refused(
    await signJwt({ alg: "HS512" }, claims({ iss: "other" }), SECRET),
    /ERR_JWT_CLAIM_VALIDATION_FAILED/,
  );
  assert.ok(error.cause instanceof Error);
  assert.equal(error.name, "TokenError");
});

Deno.test("verifyToken turns a TypeError (a key of the wrong hash) into TokenError", async () => {
  const sha256Key = await crypto.subtle.importKey(
    "raw",
    new TextEncoder().encode(SECRET),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["verify"],
  );
  const token = await signJwt({ alg: "HS512" }, claims(), SECRET);
  const error = await verifyToken(token, sha256Key, OPTIONS).then(
    () => assert.fail("accepted"),
    (error: unknown) => error,
  );
  assert.ok(error instanceof TokenError);
  assert.ok(error.cause instanceof TypeError);
});

Deno.test("verifyToken never puts the token into the reason", async () => {
  const secretLooking = "eyJzZWNyZXQiOiJ4In0";
  const tokens = [
    `${secretLooking}.${secretLooking}`,
    `${secretLooking}.${secretLooking}.${secretLooking}`,
    await signJwt({ alg: `${secretLooking}` }, claims(), SECRET),
    await signJwt({ alg: "HS512" }, claims({ aud: secretLooking }), SECRET),
  ];
  for (const token of tokens) {
    const error = await verifyToken(token, KEY, OPTIONS).then(
      () => assert.fail("accepted"),
      (error: unknown) => error as TokenError,
    );
    assert.ok(!error.reason.includes(secretLooking), error.reason);
    assert.ok(!error.message.includes(secretLooking), error.message);
  }
});

Deno.test("verifyToken names the reason for structural failures", async () => {
  const good = await signJwt({ alg: "HS512" }, claims(), SECRET);
  const [h, p, s] = good.split(".") as [string, string, string];
  await refused("", /empty token/);
  await refused(`${h}.${p}`, /2 segment/);
  await refused(`${h}.${p}.${s}.${s}.${s}`, /JWE/);
  await refused(`${h}.${p}.`, /empty signature/);
  await refused(`${h}.${p}+.${s}`, /outside base64url/);
  await refused(`${h}.${p}.${s}=`, /outside base64url/);
  await refused(
    `${h}.${p}a.${s}`,
    /impossible base64url length|signature|ERR_/,
  );
  // Refused as malformed before jose sees it: not counted as a bad signature.
  const odd = p + "A".repeat((5 - (p.length % 4)) % 4);
  const short = await refused(
    `${h}.${odd}.${s}`,
    /^payload has an impossible base64url length$/,
  );
  assert.equal(short.kind, "malformed");
  await refused(
    await encodeJwt({
      header: { bytes: new Uint8Array([0xff, 0xfe, 0x7b]) },
      payload: { json: claims() },
      secret: SECRET,
    }),
    /header is not valid UTF-8/,
  );
  await refused(
    await encodeJwt({
      header: { json: [{ alg: "HS512" }] },
      payload: { json: claims() },
      secret: SECRET,
    }),
    /header is not an object/,
  );
});
