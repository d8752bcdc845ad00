/**
 * Production authentication (HS512 JWT) and TLS configuration for the
 * management API.
 *
 * - {@linkcode AuthMiddleware} wraps any `Deno.serve` handler: a request
 *   without a valid token gets a bare `401 Unauthorized` before any route runs.
 * - {@linkcode SSLConfig} reads `ssl/server.crt` and `ssl/server.key` from a
 *   directory and checks they belong together, for `Deno.serve({ cert, key })`.
 *
 * @example Protect a handler and serve it over HTTPS when certificates exist
 * ```ts
 * import { AuthMiddleware, SSLConfig } from "@mymodel/serve/web";
 *
 * const auth = new AuthMiddleware({
 *   secret: "a shared secret of at least 64 bytes, as HS512 wants, ...........",
 *   issuer: "https://idp.example",
 * });
 * const tls = await SSLConfig.fromDirectory(Deno.cwd());
 * const handler = auth.wrap(() => new Response("ok"));
 * const tlsOptions = tls ? { cert: tls.cert, key: tls.key } : {};
 * await using server = Deno.serve(
 *   { hostname: "127.0.0.1", port: 0, onListen: () => {}, ...tlsOptions },
 *   handler,
 * );
 * ```
 *
 * @module
 */

import { join } from "node:path";
import {
  createPrivateKey,
  createPublicKey,
  X509Certificate,
} from "node:crypto";
import type { KeyObject } from "node:crypto";
import { log } from "./_log.ts";
import {
  importVerifyKey,
  MIN_SECRET_BYTES,
  TokenError,
  verifyToken,
} from "./_jwt.ts";

/**
 * A request handler, shaped like the one `Deno.serve` takes; `info` is
 * optional so tests can call it with a bare `Request`.
 */
export type Handler = (
  req: Request,
  info?: Deno.ServeHandlerInfo,
) => Response | Promise<Response>;

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
const UNAUTHORIZED_BODY = "Unauthorized";
const encoder = new TextEncoder();

/** The options object only {@linkcode AuthMiddleware.development} passes, known by identity. */
const DEVELOPMENT: AuthOptions = Object.freeze({ secret: "", issuer: "" });

function unauthorized(req: Request): Response {
  const headers = new Headers({
    "content-type": "text/plain",
    "www-authenticate": "Bearer",
  });
  if (req.url.startsWith("https:")) {
    // Scanners flag HTTPS answers without HSTS, 401s included.
    headers.set("strict-transport-security", "max-age=31536000");
  }
  return new Response(UNAUTHORIZED_BODY, { status: 401, headers });
}

function describePeer(info: Deno.ServeHandlerInfo | undefined): string {
  const addr = info?.remoteAddr;
  if (addr === undefined) return "";
  if (addr.transport === "tcp" || addr.transport === "udp") {
    return addr.hostname.includes(":")
      ? ` from [${addr.hostname}]:${addr.port}`
      : ` from ${addr.hostname}:${addr.port}`;
  }
  return ` from ${addr.transport}`;
}

function safePath(req: Request): string {
  try {
    // The path only: the query may hold `auth=<token>`.
    return new URL(req.url).pathname;
  } catch {
    return "(unparsable URL)";
  }
}

function isWebSocketUpgrade(req: Request): boolean {
  const upgrade = req.headers.get("upgrade");
  return upgrade !== null && upgrade.trim().toLowerCase() === "websocket";
}

// One or more spaces (RFC 6750: 1*SP); what follows is checked by the token
// layer, so a stray space or tab inside is refused there with a clear reason.
const BEARER = /^bearer +(.+)$/i;

/**
 * Picks the one token a request carries, or explains (for the log) why it
 * carries none or too many. Never returns a part of the token in a reason.
 */
function extractToken(req: Request): { token: string } | { reason: string } {
  const authorization = req.headers.get("authorization");
  let params: URLSearchParams;
  try {
    params = new URL(req.url).searchParams;
  } catch {
    return { reason: "unparsable request URL" };
  }
  const queryTokens = params.getAll("auth");
  const upgrade = isWebSocketUpgrade(req);

  if (queryTokens.length > 0 && !upgrade) {
    return { reason: "auth query parameter on a plain HTTP request" };
  }
  if (queryTokens.length > 0 && authorization !== null) {
    return {
      reason: "token both in Authorization and in the auth query parameter",
    };
  }
  if (upgrade) {
    if (queryTokens.length === 0) {
      return { reason: "websocket upgrade without the auth query parameter" };
    }
    if (queryTokens.length > 1) {
      return { reason: "several auth query parameters" };
    }
    const token = queryTokens[0] ?? "";
    return token === "" ? { reason: "empty auth query parameter" } : { token };
  }
  if (authorization === null) return { reason: "no Authorization header" };
  // Fetch joins repeated headers with ", "; a JWT never holds a comma.
  if (authorization.includes(",")) {
    return { reason: "several Authorization headers" };
  }
  const match = BEARER.exec(authorization);
  if (match === null) {
    if (/^bearer$/i.test(authorization)) {
      return { reason: "Bearer scheme without a token" };
    }
    return /^bearer\b/i.test(authorization)
      ? { reason: "malformed Bearer credentials (expected one or more spaces)" }
      : { reason: "Authorization scheme is not Bearer" };
  }
  return { token: match[1] ?? "" };
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
 * `401` with the body `Unauthorized` and `WWW-Authenticate: Bearer`; the
 * reason goes to the log (never the token).
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
  #enabled: boolean;
  #key: Promise<CryptoKey> | undefined;
  #issuer: string;
  #audience: string;
  #leewaySeconds: number;

  /**
   * Validates the options at once and imports the key (once, verify only).
   *
   * @param options The secret, issuer, audience and leeway.
   * @throws {AuthConfigError} When the secret (`IDP_SECRET`) or the issuer
   * (`IDP_ISSUER`) is missing or empty, the audience is empty, or the leeway
   * is not a finite number of seconds >= 0.
   */
  constructor(options: AuthOptions) {
    if (options === DEVELOPMENT) {
      this.#enabled = false;
      this.#key = undefined;
      this.#issuer = "";
      this.#audience = "";
      this.#leewaySeconds = 0;
      return;
    }
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
    const secretBytes = encoder.encode(secret).length;
    if (secretBytes < MIN_SECRET_BYTES) {
      log.warn(
        `IDP_SECRET is ${secretBytes} bytes; HS512 wants a secret of at least ${MIN_SECRET_BYTES} bytes`,
      );
    }
    this.#enabled = true;
    this.#issuer = issuer;
    this.#audience = audience;
    this.#leewaySeconds = leewaySeconds;
    this.#key = importVerifyKey(secret);
    // Awaited per request; this only keeps a failed import from going
    // unhandled before the first request arrives.
    this.#key.catch(() => {});
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
    return this.#enabled;
  }

  /**
   * Wraps a handler so it only runs for requests with a valid token.
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
    const key = this.#key;
    if (!this.#enabled || key === undefined) return handler;
    const verifyOptions = {
      issuer: this.#issuer,
      audience: this.#audience,
      leewaySeconds: this.#leewaySeconds,
    };
    return async function authenticated(
      req: Request,
      info?: Deno.ServeHandlerInfo,
    ): Promise<Response> {
      const found = extractToken(req);
      let reason: string | undefined;
      if ("reason" in found) {
        reason = found.reason;
      } else {
        try {
          await verifyToken(found.token, await key, verifyOptions);
        } catch (error) {
          reason = error instanceof TokenError
            ? error.reason
            : "verification failed";
        }
      }
      if (reason !== undefined) {
        log.warn(
          `401 ${req.method} ${safePath(req)}${describePeer(info)}: ${reason}`,
        );
        return unauthorized(req);
      }
      return await handler(req, info);
    };
  }
}

/** Settings of {@linkcode SSLConfig.fromDirectory}. */
export interface SSLConfigOptions {
  /**
   * Development mode: `ssl/ca.crt`, when present, is appended to the served
   * certificate and exposed as {@linkcode SSLConfig.ca}.
   *
   * @default {false}
   */
  devMode?: boolean;
}

/**
 * TLS cannot be configured from the files found. The message is one line,
 * `Cannot configure TLS: <file>: <what is wrong>`; the underlying error is
 * kept as `cause`.
 *
 * @example
 * ```ts
 * import { SSLConfigError } from "@mymodel/serve/web";
 * import assert from "node:assert";
 *
 * const error = new SSLConfigError("ssl/server.key", "missing");
 * assert.strictEqual(error.message, "Cannot configure TLS: ssl/server.key: missing");
 * ```
 */
export class SSLConfigError extends Error {
  /**
   * Creates the error; the message becomes
   * `Cannot configure TLS: <file>: <problem>`.
   *
   * @param file The file (or files) at fault.
   * @param problem What is wrong with it, and what is expected.
   * @param options The underlying error, kept as `cause`.
   */
  constructor(file: string, problem: string, options?: ErrorOptions) {
    super(`Cannot configure TLS: ${file}: ${problem}`, options);
    this.name = "SSLConfigError";
  }
}

async function isPresent(path: string): Promise<boolean> {
  try {
    // lstat: a dangling link is present (and then unreadable), not absent.
    await Deno.lstat(path);
    return true;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return false;
    throw new SSLConfigError(path, `cannot stat: ${oneLine(error)}`, {
      cause: error,
    });
  }
}

function oneLine(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  return text.replace(/\s+/g, " ").trim();
}

async function readPem(path: string): Promise<string> {
  try {
    return await Deno.readTextFile(path);
  } catch (error) {
    throw new SSLConfigError(path, `cannot read: ${oneLine(error)}`, {
      cause: error,
    });
  }
}

function parseCertificate(path: string, pem: string): X509Certificate {
  if (!pem.includes("-----BEGIN CERTIFICATE-----")) {
    throw new SSLConfigError(
      path,
      "not a PEM certificate (expected -----BEGIN CERTIFICATE-----)",
    );
  }
  try {
    return new X509Certificate(pem);
  } catch (error) {
    throw new SSLConfigError(
      path,
      `not a valid PEM certificate: ${oneLine(error)}`,
      { cause: error },
    );
  }
}

function parsePrivateKey(path: string, pem: string): KeyObject {
  if (pem.includes("-----BEGIN ENCRYPTED PRIVATE KEY-----")) {
    throw new SSLConfigError(
      path,
      "encrypted private keys are not supported; store the key unencrypted (mode 600)",
    );
  }
  if (!/-----BEGIN (RSA |EC )?PRIVATE KEY-----/.test(pem)) {
    throw new SSLConfigError(
      path,
      "not a PEM private key (expected -----BEGIN PRIVATE KEY-----)",
    );
  }
  try {
    return createPrivateKey(pem);
  } catch (error) {
    throw new SSLConfigError(
      path,
      `not a valid PEM private key: ${oneLine(error)}`,
      { cause: error },
    );
  }
}

function sameKey(certificate: X509Certificate, key: KeyObject): boolean {
  const fromCert = certificate.publicKey.export({
    type: "spki",
    format: "der",
  });
  const fromKey = createPublicKey(key).export({ type: "spki", format: "der" });
  return fromCert.equals(fromKey);
}

function warnAboutValidity(path: string, certificate: X509Certificate): void {
  const now = Date.now();
  if (Date.parse(certificate.validTo) < now) {
    log.warn(`${path}: certificate expired on ${certificate.validTo}`);
  } else if (Date.parse(certificate.validFrom) > now) {
    log.warn(`${path}: certificate not valid before ${certificate.validFrom}`);
  }
}

function warnAboutKeyLog(): void {
  let keyLog: string | undefined;
  try {
    keyLog = Deno.env.get("SSLKEYLOGFILE");
  } catch {
    return; // No env permission: nothing to warn about that we can see.
  }
  if (keyLog !== undefined && keyLog !== "") {
    log.warn(
      "SSLKEYLOGFILE is set: TLS session keys are written to disk; unset it in production",
    );
  }
}

/** Fields of an {@linkcode SSLConfig}, as read from disk. */
interface SSLConfigFields {
  cert: string;
  key: string;
  certFile: string;
  keyFile: string;
  ca?: string;
  caFile?: string;
}

/**
 * The PEM certificate and key to give `Deno.serve`, read from
 * `<directory>/ssl/` and checked to belong together.
 *
 * @example Serve HTTPS when `ssl/server.crt` and `ssl/server.key` exist
 * ```ts
 * import { SSLConfig } from "@mymodel/serve/web";
 *
 * const tls = await SSLConfig.fromDirectory(Deno.cwd());
 * await using server = Deno.serve({
 *   hostname: "127.0.0.1",
 *   port: 0,
 *   onListen: () => {},
 *   ...(tls ? { cert: tls.cert, key: tls.key } : {}),
 * }, () => new Response("ok"));
 * ```
 */
export class SSLConfig {
  /**
   * The PEM chain to serve: `server.crt`, followed in development mode by
   * `ca.crt` when present, so clients can build the path.
   */
  readonly cert: string;
  /** The PEM private key (`server.key`). */
  readonly key: string;
  /** Contents of `ca.crt` (development mode only, when present). */
  declare readonly ca?: string;
  /** Path of `server.crt`. */
  readonly certFile: string;
  /** Path of `server.key`. */
  readonly keyFile: string;
  /** Path of `ca.crt`, when it was used. */
  declare readonly caFile?: string;

  private constructor(fields: SSLConfigFields) {
    this.cert = fields.cert;
    this.key = fields.key;
    this.certFile = fields.certFile;
    this.keyFile = fields.keyFile;
    if (fields.ca !== undefined) this.ca = fields.ca;
    if (fields.caFile !== undefined) this.caFile = fields.caFile;
  }

  /**
   * Reads `<directory>/ssl/server.crt` and `<directory>/ssl/server.key`.
   *
   * @param directory The directory holding the `ssl` folder.
   * @param options `devMode` to serve `ssl/ca.crt` along.
   * @returns The configuration, or `undefined` when neither file exists
   * (serve plain HTTP).
   * @throws {SSLConfigError} When only one of the two files exists, a file
   * cannot be read or is not PEM, or the certificate and key do not match.
   *
   * @example No ssl folder means plain HTTP
   * ```ts
   * import { SSLConfig } from "@mymodel/serve/web";
   * import assert from "node:assert";
   *
   * const directory = await Deno.makeTempDir();
   * assert.strictEqual(await SSLConfig.fromDirectory(directory), undefined);
   * await Deno.remove(directory);
   * ```
   */
  static async fromDirectory(
    directory: string,
    options: SSLConfigOptions = {},
  ): Promise<SSLConfig | undefined> {
    const certFile = join(directory, "ssl", "server.crt");
    const keyFile = join(directory, "ssl", "server.key");
    const [hasCert, hasKey] = await Promise.all([
      isPresent(certFile),
      isPresent(keyFile),
    ]);
    if (!hasCert && !hasKey) return undefined;
    if (!hasKey) {
      throw new SSLConfigError(
        keyFile,
        `missing (found ${certFile}; both files are needed for HTTPS)`,
      );
    }
    if (!hasCert) {
      throw new SSLConfigError(
        certFile,
        `missing (found ${keyFile}; both files are needed for HTTPS)`,
      );
    }
    const cert = await readPem(certFile);
    const key = await readPem(keyFile);
    const certificate = parseCertificate(certFile, cert);
    const privateKey = parsePrivateKey(keyFile, key);
    let matches: boolean;
    try {
      matches = sameKey(certificate, privateKey);
    } catch (error) {
      throw new SSLConfigError(
        `${certFile} and ${keyFile}`,
        `cannot compare the public keys: ${oneLine(error)}`,
        { cause: error },
      );
    }
    if (!matches) {
      throw new SSLConfigError(
        `${certFile} and ${keyFile}`,
        "the private key does not belong to the certificate",
      );
    }
    warnAboutValidity(certFile, certificate);

    const fields: SSLConfigFields = { cert, key, certFile, keyFile };
    if (options.devMode) {
      const caFile = join(directory, "ssl", "ca.crt");
      if (await isPresent(caFile)) {
        const ca = await readPem(caFile);
        const authority = parseCertificate(caFile, ca);
        if (!certificate.checkIssued(authority)) {
          log.warn(`${certFile} was not issued by ${caFile}`);
        }
        fields.cert = `${cert.trimEnd()}\n${ca.trimStart()}`;
        fields.ca = ca;
        fields.caFile = caFile;
      }
    } else {
      warnAboutKeyLog();
    }
    return new SSLConfig(fields);
  }
}
