/**
 * Production authentication: an HS512 JWT on every request, checked before
 * any route runs.
 *
 * Folder `web/`: what wraps any handler (JWT, credentials, TLS files,
 * security headers, the mode); public through `web.ts`. It knows nothing of
 * `serve`, the catalogue, engines or routes.
 *
 * @module
 */
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
}

/**
 * The options given to {@linkcode AuthMiddleware} cannot work; the message
 * names the setting (`IDP_SECRET`, `IDP_ISSUER`, ...).
 *
 * @example
 * ```ts
 * import { AuthConfigError, AuthMiddleware } from "@mymodel/serve/web";
 * import assert from "node:assert";
 *
 * assert.throws(
 *   () => new AuthMiddleware({ secret: "", issuer: "https://idp.example" }),
 *   AuthConfigError,
 * );
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
const encoder = new TextEncoder();
/** Passed only by {@linkcode AuthMiddleware.development}, known by identity. */
const DEVELOPMENT: AuthOptions = Object.freeze({ secret: "", issuer: "" });

function verifyKeyOf(secret: string): Promise<CryptoKey> {
  const secretBytes = encoder.encode(secret).length;
  if (secretBytes < MIN_SECRET_BYTES) {
    log.warn(
      `IDP_SECRET is ${secretBytes} bytes; HS512 wants a secret of at least ${MIN_SECRET_BYTES} bytes`,
    );
  }
  const key = importVerifyKey(secret);
  // Awaited per request; this keeps a failed import from going unhandled before then.
  key.catch(() => {});
  return key;
}

function unauthorized(req: Request): Response {
  const headers = new Headers({
    "content-type": "text/plain",
    "www-authenticate": "Bearer",
  });
  // Used on its own, the middleware still answers like the API: scanners
  // flag a 401 without the security headers.
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

/**
 * Refuses every request that does not carry a valid HS512 JWT, before the
 * wrapped handler runs: `Authorization: Bearer <token>`, or `?auth=<token>`
 * on a websocket upgrade. `iss` must equal the issuer, `aud` equal (or
 * contain) the audience, `exp` be finite and in the future, `nbf`/`iat` not
 * in the future. A refusal answers `401 Unauthorized` with
 * `WWW-Authenticate: Bearer` and the security headers, is counted by reason
 * ({@linkcode AuthMiddleware.failures}) and logged at most once per reason
 * in 10 s, then as a count (never the token).
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
  // Both undefined in development.
  #key: Promise<CryptoKey> | undefined;
  #verifyOptions: VerifyTokenOptions | undefined;
  #failures = Object.fromEntries(
    AUTH_FAILURE_REASONS.map((reason) => [reason, 0]),
  ) as Record<AuthFailureReason, number>;

  /**
   * Validates the options at once and imports the key (verify only).
   *
   * @param options The secret, issuer, audience and leeway.
   * @throws {AuthConfigError} When the secret or the issuer is missing or
   *   empty, the audience is empty, or the leeway is not a finite number >= 0.
   */
  constructor(options: AuthOptions) {
    if (options === DEVELOPMENT) return;
    // `unknown`: JavaScript callers may pass anything.
    const secret: unknown = options?.secret;
    const issuer: unknown = options?.issuer;
    const audience: unknown = options?.audience ?? DEFAULT_AUDIENCE;
    const leewaySeconds: unknown = options?.leewaySeconds ?? 0;
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
    this.#verifyOptions = { issuer, audience, leewaySeconds };
    this.#key = verifyKeyOf(secret);
  }

  /**
   * Verifies every later request with a new secret (a rotated
   * `IDP_SECRET_FILE`); an {@linkcode AuthConfigError} when it is empty or in
   * development.
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
  }

  /** A pass-through for development: {@linkcode AuthMiddleware.wrap} returns the handler itself. */
  static development(): AuthMiddleware {
    return new AuthMiddleware(DEVELOPMENT);
  }

  /** Whether requests are checked (false in development). */
  get enabled(): boolean {
    return this.#key !== undefined;
  }

  /** Refusals so far by reason, over every wrapped handler: a frozen snapshot. */
  get failures(): AuthFailures {
    return Object.freeze({ ...this.#failures });
  }

  /**
   * Wraps a handler so it only runs for requests with a valid token. Each
   * wrapped handler has its own log window; the counts are shared.
   *
   * @param handler The protected handler.
   * @returns The checking handler, or `handler` itself when disabled.
   */
  wrap(handler: Handler): Handler {
    const verifyOptions = this.#verifyOptions;
    if (!this.#key || !verifyOptions) return handler;
    const failures = this.#failures;
    const throttle = new LogThrottle({ write: log.warn });
    // Read per request: rotateSecret() replaces the key.
    const currentKey = () => this.#key!;

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

    return async function authenticated(
      req: Request,
      info?: Deno.ServeHandlerInfo,
    ): Promise<Response> {
      const found = extractToken(req);
      if ("reason" in found) return refuse(req, info, found.kind, found.reason);
      try {
        await verifyToken(found.token, await currentKey(), verifyOptions);
      } catch (error) {
        const { kind, reason } = error instanceof TokenError
          ? error
          : { kind: "other" as const, reason: "verification failed" };
        return refuse(req, info, kind, reason);
      }
      return await handler(req, info);
    };
  }
}
