/**
 * Production authentication: an HS512 JWT on every request, checked before
 * any route runs.
 *
 * Folder `web/`: what wraps any handler: production authentication (JWT, token
 * cache, credentials, failure reasons), TLS files, security headers and the
 * mode (`OpsStance`); public through `web.ts`. It knows nothing of `serve`,
 * the catalogue, engines or routes.
 *
 * @module
 */

import type { JWTPayload } from "jose";
import { log } from "../common/log.ts";
import { urlHost } from "../common/settings.ts";
import {
  importVerifyKey,
  MIN_SECRET_BYTES,
  TokenError,
  verifyToken,
  type VerifyTokenOptions,
} from "./jwt.ts";
import {
  AUTH_FAILURE_REASONS,
  type AuthFailureReason,
  type AuthFailures,
} from "./auth_failures.ts";
import { extractToken } from "./credentials.ts";
import { LogThrottle } from "../common/log_throttle.ts";
import {
  type Handler,
  loggedPath,
  setSecurityHeaders,
} from "./security_headers.ts";
import { TokenCache } from "./token_cache.ts";

/** Settings of {@linkcode AuthMiddleware}. */
export interface AuthOptions {
  /** Shared HS512 secret, as text (its UTF-8 bytes are the key); `IDP_SECRET`. */
  secret: string;
  /** Exact value the `iss` claim must hold; `IDP_ISSUER`. */
  issuer: string;
  /**
   * Value the `aud` claim must equal, or contain when it is an array.
   *
   * @default {"nexus"}
   */
  audience?: string;
  /**
   * Clock skew tolerated on `exp`, `nbf` and `iat`, in seconds.
   *
   * @default {0}
   */
  leewaySeconds?: number;
  /**
   * Most verified tokens remembered (least recently used out). A remembered
   * token skips the signature check; its `exp` and `nbf` are checked again on
   * every use.
   *
   * @default {1024}
   */
  tokenCacheSize?: number;
}

/**
 * The options given to {@linkcode AuthMiddleware} cannot work: the message
 * names the setting (`IDP_SECRET`, `IDP_ISSUER`, ...) and what is expected.
 *
 * @example
 * ```ts
 * import { AuthConfigError, AuthMiddleware } from "@mymodel/serve/web";
 * import assert from "node:assert";
 *
 * try {
 *   new AuthMiddleware({ secret: "", issuer: "https://idp.example" });
 * } catch (error) {
 *   assert(error instanceof AuthConfigError);
 * }
 * ```
 */
export class AuthConfigError extends TypeError {
  /**
   * Creates the error.
   *
   * @param message What is wrong and what is expected.
   * @param options The underlying error, kept as `cause`.
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "AuthConfigError";
  }
}

const DEFAULT_AUDIENCE = "nexus";
const DEFAULT_CACHE_SIZE = 1024;
const encoder = new TextEncoder();

/** The options object only {@linkcode AuthMiddleware.development} passes, known by identity. */
const DEVELOPMENT: AuthOptions = Object.freeze({ secret: "", issuer: "" });

/** The verify-only key of a secret, warning when HS512 would want it longer. */
function verifyKeyOf(secret: string): Promise<CryptoKey> {
  const secretBytes = encoder.encode(secret).length;
  if (secretBytes < MIN_SECRET_BYTES) {
    log.warn(
      `IDP_SECRET is ${secretBytes} bytes; HS512 wants a secret of at least ${MIN_SECRET_BYTES} bytes`,
    );
  }
  const key = importVerifyKey(secret);
  // Awaited per request; this only keeps a failed import from going
  // unhandled before the first request arrives.
  key.catch(() => {});
  return key;
}

function unauthorized(req: Request): Response {
  const headers = new Headers({
    "content-type": "text/plain",
    "www-authenticate": "Bearer",
  });
  // Used on its own, the middleware still answers like the API: scanners
  // flag a 401 without the security headers (and without HSTS over HTTPS).
  setSecurityHeaders(headers, req.url.startsWith("https:"));
  return new Response("Unauthorized", { status: 401, headers });
}

function describePeer(info: Deno.ServeHandlerInfo | undefined): string {
  const addr = info?.remoteAddr;
  if (addr === undefined) return "";
  if (addr.transport === "tcp" || addr.transport === "udp") {
    return ` from ${urlHost(addr.hostname)}:${addr.port}`;
  }
  return ` from ${addr.transport}`;
}

/** The fixed reason and the log text of a verification failure. */
function describeFailure(
  error: unknown,
): { kind: AuthFailureReason; reason: string } {
  return error instanceof TokenError
    ? { kind: error.kind, reason: error.reason }
    : { kind: "other", reason: "verification failed" };
}

/**
 * Refuses every request that does not carry a valid HS512 JWT, before the
 * wrapped handler (and so before any route) runs.
 *
 * Plain HTTP requests carry `Authorization: Bearer <token>`; websocket upgrade
 * requests carry `?auth=<token>` instead. The token must be a compact JWS
 * signed with HS512 and the shared secret, with `iss` equal to the issuer,
 * `aud` equal to (or containing) the audience, a finite `exp` in the future,
 * and `nbf`/`iat`, when present, not in the future. Any failure answers
 * `401` with the body `Unauthorized`, `WWW-Authenticate: Bearer` and the
 * security headers. Every refusal is counted by reason
 * ({@linkcode AuthMiddleware.failures}); the log gets the first refusal of
 * each reason in a 10 s window, then one line counting the rest (never the
 * token).
 *
 * A token that passed every check is remembered (by its exact text, at most
 * `tokenCacheSize` of them): its next uses skip the signature check and are
 * answered without a promise, but `exp` and `nbf` are checked every time.
 *
 * @example Protect a handler
 * ```ts
 * import { AuthMiddleware } from "@mymodel/serve/web";
 * import assert from "node:assert";
 *
 * const auth = new AuthMiddleware({
 *   secret: "a".repeat(64),
 *   issuer: "https://idp.example",
 * });
 * const handler = auth.wrap(() => new Response("models"));
 * const response = await handler(new Request("http://localhost/models"));
 * assert.strictEqual(response.status, 401);
 * assert.strictEqual(await response.text(), "Unauthorized");
 * ```
 */
export class AuthMiddleware {
  // All three undefined in development.
  #key: Promise<CryptoKey> | undefined;
  #verifyOptions: VerifyTokenOptions | undefined;
  #cache: TokenCache | undefined;
  #failures = Object.fromEntries(
    AUTH_FAILURE_REASONS.map((reason) => [reason, 0]),
  ) as Record<AuthFailureReason, number>;

  /**
   * Validates the options at once and imports the key (once, verify only).
   *
   * @param options The secret, issuer, audience and leeway.
   * @throws {AuthConfigError} When the secret (`IDP_SECRET`) or the issuer
   * (`IDP_ISSUER`) is missing or empty, the audience is empty, or the leeway
   * is not a finite number of seconds >= 0, or the token cache size is not
   * an integer >= 1.
   */
  constructor(options: AuthOptions) {
    if (options === DEVELOPMENT) return;
    // `unknown`: JavaScript callers may pass anything.
    const secret: unknown = options?.secret;
    const issuer: unknown = options?.issuer;
    const audience: unknown = options?.audience ?? DEFAULT_AUDIENCE;
    const leewaySeconds: unknown = options?.leewaySeconds ?? 0;
    const cacheSize: unknown = options?.tokenCacheSize ?? DEFAULT_CACHE_SIZE;
    if (typeof secret !== "string" || secret === "") {
      throw new AuthConfigError(
        "Cannot enable authentication: the JWT secret (IDP_SECRET) is missing or empty",
      );
    }
    if (typeof issuer !== "string" || issuer === "") {
      throw new AuthConfigError(
        "Cannot enable authentication: the JWT issuer (IDP_ISSUER) is missing or empty",
      );
    }
    if (typeof audience !== "string" || audience === "") {
      throw new AuthConfigError(
        'Cannot enable authentication: the JWT audience is empty, expected a name such as "nexus"',
      );
    }
    if (
      typeof leewaySeconds !== "number" || !Number.isFinite(leewaySeconds) ||
      leewaySeconds < 0
    ) {
      throw new AuthConfigError(
        "Cannot enable authentication: leewaySeconds must be a finite number >= 0",
      );
    }
    if (
      typeof cacheSize !== "number" || !Number.isInteger(cacheSize) ||
      cacheSize < 1
    ) {
      throw new AuthConfigError(
        "Cannot enable authentication: tokenCacheSize must be an integer >= 1",
      );
    }
    this.#verifyOptions = { issuer, audience, leewaySeconds };
    this.#cache = new TokenCache({ capacity: cacheSize, leewaySeconds });
    this.#key = verifyKeyOf(secret);
  }

  /**
   * Verifies every later request with a new secret (a rotated
   * `IDP_SECRET_FILE`): tokens signed with the old one are refused from now
   * on, and the verified-token cache is emptied.
   *
   * @param secret The new shared secret, non-empty.
   * @throws {AuthConfigError} When the secret is empty, or the middleware is
   *   the development pass-through.
   *
   * @example
   * ```ts
   * import { AuthMiddleware } from "@mymodel/serve/web";
   *
   * const auth = new AuthMiddleware({ secret: "a".repeat(64), issuer: "https://idp.example" });
   * auth.rotateSecret("b".repeat(64));
   * ```
   */
  rotateSecret(secret: string): void {
    if (!this.enabled) {
      throw new AuthConfigError(
        "Cannot rotate the JWT secret: authentication is off (development mode)",
      );
    }
    if (typeof secret !== "string" || secret === "") {
      throw new AuthConfigError(
        "Cannot rotate the JWT secret (IDP_SECRET): the new secret is missing or empty",
      );
    }
    this.#key = verifyKeyOf(secret);
    this.#cache?.clear();
  }

  /**
   * A pass-through for development: {@linkcode AuthMiddleware.wrap} returns
   * the handler unchanged and no request is checked.
   *
   * @returns A disabled middleware.
   *
   * @example
   * ```ts
   * import { AuthMiddleware } from "@mymodel/serve/web";
   * import assert from "node:assert";
   *
   * const auth = AuthMiddleware.development();
   * function handler(): Response {
   *   return new Response("ok");
   * }
   * assert(auth.wrap(handler) === handler);
   * ```
   */
  static development(): AuthMiddleware {
    return new AuthMiddleware(DEVELOPMENT);
  }

  /**
   * Whether requests are checked (false for
   * {@linkcode AuthMiddleware.development}).
   *
   * @returns `true` in production.
   *
   * @example
   * ```ts
   * import { AuthMiddleware } from "@mymodel/serve/web";
   * import assert from "node:assert";
   *
   * assert.strictEqual(AuthMiddleware.development().enabled, false);
   * ```
   */
  get enabled(): boolean {
    return this.#key !== undefined;
  }

  /**
   * Refusals so far, counted by reason over every handler this middleware
   * wrapped (all zero in development). A frozen snapshot: read it again for
   * newer counts. The metrics (`mymodel_auth_failures_total{reason}`) read it.
   *
   * @returns One count per {@linkcode AuthFailureReason}.
   *
   * @example Count refusals by reason
   * ```ts
   * import { AuthMiddleware } from "@mymodel/serve/web";
   * import assert from "node:assert";
   *
   * const auth = new AuthMiddleware({
   *   secret: "a".repeat(64),
   *   issuer: "https://idp.example",
   * });
   * const handler = auth.wrap(() => new Response("ok"));
   * await handler(new Request("http://localhost/health"));
   * assert.strictEqual(auth.failures.missing, 1);
   * assert(Object.isFrozen(auth.failures));
   * ```
   */
  get failures(): AuthFailures {
    return Object.freeze({ ...this.#failures });
  }

  /**
   * Wraps a handler so it only runs for requests with a valid token.
   *
   * Each wrapped handler keeps its own log window per reason; the counts in
   * {@linkcode AuthMiddleware.failures} are shared.
   *
   * @param handler The protected handler.
   * @returns The checking handler, or `handler` itself when disabled.
   *
   * @example Serve a protected handler
   * ```ts
   * import { AuthMiddleware } from "@mymodel/serve/web";
   * import assert from "node:assert";
   *
   * const auth = new AuthMiddleware({
   *   secret: "a shared secret of at least 64 bytes, as HS512 wants, ...........",
   *   issuer: "https://idp.example",
   * });
   * await using server = Deno.serve(
   *   { hostname: "127.0.0.1", port: 0, onListen: () => {} },
   *   auth.wrap(() => new Response("ok")),
   * );
   * const response = await fetch(`http://127.0.0.1:${server.addr.port}/health`);
   * assert.strictEqual(response.status, 401);
   * assert.strictEqual(response.headers.get("www-authenticate"), "Bearer");
   * await response.body?.cancel();
   * ```
   */
  wrap(handler: Handler): Handler {
    const cache = this.#cache;
    const verifyOptions = this.#verifyOptions;
    if (!this.#key || !cache || !verifyOptions) return handler;
    // Read per request: rotateSecret() replaces the key.
    const currentKey = () => this.#key as Promise<CryptoKey>;
    const failures = this.#failures;
    const throttle = new LogThrottle({ write: log.warn });

    function refuse(
      req: Request,
      info: Deno.ServeHandlerInfo | undefined,
      kind: AuthFailureReason,
      reason: string,
    ): Response {
      failures[kind]++;
      throttle.hit(
        `401 ${kind}`,
        () =>
          `401 ${req.method} ${loggedPath(req.url)}${
            describePeer(info)
          }: ${reason}`,
      );
      return unauthorized(req);
    }

    const verifyThenHandle = async (
      req: Request,
      info: Deno.ServeHandlerInfo | undefined,
      token: string,
    ): Promise<Response> => {
      let claims: JWTPayload;
      const key = currentKey();
      try {
        claims = await verifyToken(token, await key, verifyOptions);
      } catch (error) {
        const { kind, reason } = describeFailure(error);
        return refuse(req, info, kind, reason);
      }
      // Only now, every check passed. verifyToken made sure exp (and nbf,
      // when present) are finite numbers. A token verified with a key
      // rotated away meanwhile is served once, not remembered.
      if (currentKey() === key) {
        cache.add(token, { exp: claims.exp as number, nbf: claims.nbf });
      }
      return await handler(req, info);
    };

    // Not async: a remembered token is answered without a promise.
    return function authenticated(
      req: Request,
      info?: Deno.ServeHandlerInfo,
    ): Response | Promise<Response> {
      const found = extractToken(req);
      if ("reason" in found) return refuse(req, info, found.kind, found.reason);
      let known: boolean;
      try {
        known = cache.check(found.token, Date.now() / 1000);
      } catch (error) {
        const { kind, reason } = describeFailure(error);
        return refuse(req, info, kind, reason);
      }
      return known
        ? handler(req, info)
        : verifyThenHandle(req, info, found.token);
    };
  }
}
