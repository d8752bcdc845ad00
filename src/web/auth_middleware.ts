/**
 * Production authentication: an HS512 JWT on every request, checked before
 * any route runs. `web/` wraps any handler and knows nothing of `serve`.
 *
 * @module
 */
import { log } from "../common/log.ts";
import { urlHost } from "../common/settings.ts";
import { LogThrottle } from "../common/log_throttle.ts";
import {
  importVerifyKey,
  malformed,
  TokenError,
  verifyToken,
  type VerifyTokenOptions,
} from "./jwt.ts";
import { AUTH_FAILURE_REASONS, type AuthFailures } from "./auth_failures.ts";
import {
  type Handler,
  loggedPath,
  setSecurityHeaders,
} from "./security_headers.ts";

/** Settings of {@linkcode AuthMiddleware}. */
export interface AuthOptions {
  /** Shared HS512 secret, as text (its UTF-8 bytes are the key); `IDP_SECRET`. */
  secret: string;
  /** Exact value the `iss` claim must hold; `IDP_ISSUER`. */
  issuer: string;
  /** Value the `aud` claim must equal, or contain when it is an array. @default {"nexus"} */
  audience?: string;
  /** Clock skew tolerated on `exp`, `nbf` and `iat`, in seconds. @default {0} */
  leewaySeconds?: number;
}

/** The options cannot work; the message names the setting (`IDP_SECRET`, ...). */
export class AuthConfigError extends TypeError {
  override name = "AuthConfigError";
}

function configError(problem: string): AuthConfigError {
  return new AuthConfigError(`Cannot enable authentication: ${problem}`);
}

/** Passed only by {@linkcode AuthMiddleware.development}, known by identity. */
const DEVELOPMENT: AuthOptions = Object.freeze({ secret: "", issuer: "" });

// One or more spaces (RFC 6750: 1*SP); what follows is checked by the token
// layer, so a stray space or tab inside is refused there with a clear reason.
const BEARER = /^bearer +(.+)$/i;

function missing(reason: string): TokenError {
  return new TokenError("missing", reason);
}

/** `Authorization: Bearer <token>`, or `?auth=<token>` on a websocket upgrade, never both. */
function extractToken(req: Request): string {
  const authorization = req.headers.get("authorization");
  const query = new URL(req.url).searchParams.getAll("auth");
  const upgrade =
    req.headers.get("upgrade")?.trim().toLowerCase() === "websocket";

  if (query.length > 0 && !upgrade) {
    throw malformed("auth query parameter on a plain HTTP request");
  }
  if (query.length > 0 && authorization !== null) {
    throw malformed(
      "token both in Authorization and in the auth query parameter",
    );
  }
  if (upgrade) {
    if (query.length === 0) {
      throw missing("websocket upgrade without the auth query parameter");
    }
    if (query.length > 1) throw malformed("several auth query parameters");
    if (query[0] === "") throw missing("empty auth query parameter");
    return query[0]!;
  }
  if (authorization === null) throw missing("no Authorization header");
  // Fetch joins repeated headers with ", "; a JWT never holds a comma.
  if (authorization.includes(",")) {
    throw malformed("several Authorization headers");
  }
  const match = BEARER.exec(authorization);
  if (match !== null) return match[1]!;
  if (/^bearer$/i.test(authorization)) {
    throw missing("Bearer scheme without a token");
  }
  throw /^bearer\b/i.test(authorization)
    ? malformed("malformed Bearer credentials (expected one or more spaces)")
    : missing("Authorization scheme is not Bearer");
}

function unauthorized(req: Request): Response {
  const headers = new Headers({
    "content-type": "text/plain",
    "www-authenticate": "Bearer",
  });
  // Used on its own, the middleware still answers like the API: scanners flag a 401 without the security headers.
  setSecurityHeaders(headers, req.url.startsWith("https:"));
  return new Response("Unauthorized", { status: 401, headers });
}

function describePeer(info: Deno.ServeHandlerInfo | undefined): string {
  const addr = info?.remoteAddr;
  if (addr === undefined) return "";
  if (!("hostname" in addr)) return ` from ${addr.transport}`;
  return ` from ${urlHost(addr.hostname)}:${addr.port}`;
}

/**
 * Refuses every request that does not carry a valid HS512 JWT, before the
 * wrapped handler runs: `Authorization: Bearer <token>`, or `?auth=<token>`
 * on a websocket upgrade. A refusal answers `401 Unauthorized` with
 * `WWW-Authenticate: Bearer` and the security headers, is counted by reason
 * and logged at most once per reason in 10 s (never the token).
 *
 * @example
 * ```ts
 * import { AuthMiddleware } from "@mymodel/serve/web";
 * import assert from "node:assert";
 *
 * const auth = new AuthMiddleware({ secret: "a".repeat(64), issuer: "https://idp.example" });
 * const response = await auth.wrap(() => new Response("models"))(
 *   new Request("http://localhost/models"),
 * );
 * assert.strictEqual(response.status, 401);
 * ```
 */
export class AuthMiddleware {
  // Undefined in development; rotateSecret() replaces the key.
  #verifier:
    | { key: Promise<CryptoKey>; options: VerifyTokenOptions }
    | undefined;
  #failures = Object.fromEntries(
    AUTH_FAILURE_REASONS.map((reason) => [reason, 0]),
  ) as Record<keyof AuthFailures, number>;

  /**
   * Validates the options at once and imports the key (verify only).
   * @throws {AuthConfigError} When an option cannot work (the message names it).
   */
  constructor(options: AuthOptions) {
    if (options === DEVELOPMENT) return;
    // `unknown`: JavaScript callers may pass anything.
    const { secret, issuer, audience = "nexus", leewaySeconds = 0 } =
      (options ?? {}) as Record<keyof AuthOptions, unknown>;
    if (typeof secret !== "string" || secret === "") {
      throw configError("the JWT secret (IDP_SECRET) is missing or empty");
    }
    if (typeof issuer !== "string" || issuer === "") {
      throw configError("the JWT issuer (IDP_ISSUER) is missing or empty");
    }
    if (typeof audience !== "string" || audience === "") {
      throw configError(
        'the JWT audience is empty, expected a name such as "nexus"',
      );
    }
    if (
      typeof leewaySeconds !== "number" || !Number.isFinite(leewaySeconds) ||
      leewaySeconds < 0
    ) {
      throw configError("leewaySeconds must be a finite number >= 0");
    }
    this.#verifier = {
      key: importVerifyKey(secret),
      options: { issuer, audience, leewaySeconds },
    };
  }

  /** Verifies every later request with a new secret (a rotated `IDP_SECRET_FILE`). */
  rotateSecret(secret: string): void {
    if (!this.#verifier) {
      throw new AuthConfigError(
        "Cannot rotate the JWT secret: authentication is off (development mode)",
      );
    }
    if (typeof secret !== "string" || secret === "") {
      throw new AuthConfigError(
        "Cannot rotate the JWT secret (IDP_SECRET): the new secret is missing or empty",
      );
    }
    this.#verifier.key = importVerifyKey(secret);
  }

  /** A pass-through for development: {@linkcode AuthMiddleware.wrap} returns the handler itself. */
  static development(): AuthMiddleware {
    return new AuthMiddleware(DEVELOPMENT);
  }

  /** Whether requests are checked (false in development). */
  get enabled(): boolean {
    return this.#verifier !== undefined;
  }

  /** Refusals so far by reason, over every wrapped handler: a frozen snapshot. */
  get failures(): AuthFailures {
    return Object.freeze({ ...this.#failures });
  }

  /**
   * Wraps a handler so it only runs for requests with a valid token, or
   * returns it as it is in development. Each wrapped handler has its own log
   * window; the counts are shared.
   */
  wrap(handler: Handler): Handler {
    const verifier = this.#verifier;
    if (!verifier) return handler;
    const failures = this.#failures;
    const throttle = new LogThrottle({ write: log.warn });

    return async function authenticated(
      req: Request,
      info?: Deno.ServeHandlerInfo,
    ): Promise<Response> {
      try {
        const token = extractToken(req);
        await verifyToken(token, await verifier.key, verifier.options);
      } catch (error) {
        const { kind, reason } = error instanceof TokenError
          ? error
          : { kind: "other" as const, reason: "verification failed" };
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
      return await handler(req, info);
    };
  }
}
