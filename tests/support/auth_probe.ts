/**
 * Shared by the AuthMiddleware tests: a secret and an issuer, tokens minted
 * with jose or forged by the hand encoder, requests carrying them, and the
 * assertions every refusal makes (401, `text/plain`, `Unauthorized`,
 * `WWW-Authenticate: Bearer`, the protected handler never ran, one log line
 * naming the reason and never the token).
 */
import assert from "node:assert/strict";
import { SignJWT } from "jose";
import { captureLog } from "./helpers.ts";
import { AuthMiddleware } from "../../src/web.ts";
import type { Handler } from "../../src/web.ts";
import { encodeJwt, signJwt } from "./jwt_encoder.ts";
import type { Part } from "./jwt_encoder.ts";

export const SECRET =
  "web-test-secret-that-is-long-enough-for-hs512-0123456789abcdefghijklmnop";
export const ATTACKER_SECRET =
  "attacker-chosen-secret-0123456789abcdef0123456789abcdef01";
export const ISSUER = "https://idp.example.test/realms/main";
export const AUTH = new AuthMiddleware({ secret: SECRET, issuer: ISSUER });

export const textEncoder = new TextEncoder();

// ---------------------------------------------------------------------------
// Tokens

export function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

export function claims(
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  const now = nowSeconds();
  return { iss: ISSUER, aud: "nexus", iat: now - 1, exp: now + 300, ...extra };
}

export function without(
  source: Record<string, unknown>,
  name: string,
): Record<string, unknown> {
  const copy = { ...source };
  delete copy[name];
  return copy;
}

/** A valid token (for `secret`, the test secret by default), minted with jose. */
export function mint(
  extra: Record<string, unknown> = {},
  secret: string = SECRET,
): Promise<string> {
  return new SignJWT(claims(extra))
    .setProtectedHeader({ alg: "HS512", typ: "JWT" })
    .sign(textEncoder.encode(secret));
}

/** A compact token's three segments: header, payload, signature. */
export function segments(token: string): [string, string, string] {
  return token.split(".") as [string, string, string];
}

/** A token signed with the real secret (HS512) by the hand encoder. */
export function forge(header: unknown, payload: unknown): Promise<string> {
  return signJwt(header, payload, SECRET);
}

export function forgeParts(header: Part, payload: Part): Promise<string> {
  return encodeJwt({ header, payload, secret: SECRET });
}

// ---------------------------------------------------------------------------
// Requests and assertions

export function bearer(
  token: string,
  scheme = "Bearer",
  path = "/models",
): Request {
  return new Request(`http://localhost${path}`, {
    headers: { authorization: `${scheme} ${token}` },
  });
}

export function upgrade(query: string, headers: HeadersInit = {}): Request {
  const request = new Request(`http://localhost/ws${query}`, { headers });
  request.headers.set("upgrade", "websocket");
  request.headers.set("connection", "Upgrade");
  return request;
}

export interface Probe {
  readonly handlerExecuted: boolean;
  handler: Handler;
}

export function probe(auth: AuthMiddleware = AUTH): Probe {
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

export interface RefusalOptions {
  /** The token the request carried: it must not reach the log. */
  token?: string;
  /** What the log line must say. */
  reason?: RegExp;
  auth?: AuthMiddleware;
  info?: Deno.ServeHandlerInfo;
}

/** Asserts the full 401 answer; returns the one warning logged. */
export async function assertUnauthorized(
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

export async function assertAccepted(
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
export function refuseBearer(token: string, reason?: RegExp): Promise<string> {
  return assertUnauthorized(
    bearer(token),
    reason ? { token, reason } : { token },
  );
}
