// Strict verification of compact HS512 JWTs; no HTTP here. jose's `jwtVerify`
// checks the signature and standard claims; the checks around it close the
// gaps it leaves (docs/security.md, "Token checks, case by case").
import { errors, type JWTPayload, jwtVerify } from "jose";
import { log } from "../common/log.ts";
import type { AuthFailureReason } from "./auth_failures.ts";

const ALGORITHM = "HS512";

/** Longest accepted token, in bytes (checked before anything is decoded). */
export const MAX_TOKEN_BYTES = 8 * 1024;

/** HS512 wants a key at least as long as its output (RFC 7518, section 3.2). */
const MIN_SECRET_BYTES = 64;

const BASE64URL = /^[A-Za-z0-9_-]*$/;
const SEGMENTS = ["header", "payload", "signature"];
const strictDecoder = new TextDecoder("utf-8", { fatal: true });

/** `reason` is safe to log: it never holds any part of the token. */
export class TokenError extends Error {
  readonly kind: AuthFailureReason;
  readonly reason: string;

  constructor(kind: AuthFailureReason, reason: string, init?: ErrorOptions) {
    super(`Cannot accept the token: ${reason}`, init);
    this.name = "TokenError";
    this.kind = kind;
    this.reason = reason;
  }
}

export function malformed(reason: string, init?: ErrorOptions): TokenError {
  return new TokenError("malformed", reason, init);
}

export interface VerifyTokenOptions {
  issuer: string;
  audience: string;
  leewaySeconds: number;
  /** Seconds since the epoch (tests); the clock by default. */
  now?: number;
}

/** `secret` is `IDP_SECRET`: a short one is used, with a warning. */
export function importVerifyKey(secret: string): Promise<CryptoKey> {
  const bytes = new TextEncoder().encode(secret);
  if (bytes.length < MIN_SECRET_BYTES) {
    log.warn(
      `IDP_SECRET is ${bytes.length} bytes; HS512 wants a secret of at least ${MIN_SECRET_BYTES} bytes`,
    );
  }
  const hmac = { name: "HMAC", hash: "SHA-512" };
  const key = crypto.subtle.importKey("raw", bytes, hmac, false, ["verify"]);
  // Awaited per request; this keeps a failed import from going unhandled before then.
  key.catch(() => {});
  return key;
}

function decodeHeader(segment: string): unknown {
  let step = "base64url";
  try {
    const bytes = Uint8Array.fromBase64(segment, { alphabet: "base64url" });
    step = "UTF-8";
    const text = strictDecoder.decode(bytes);
    step = "JSON";
    return JSON.parse(text);
  } catch (cause) {
    throw malformed(`header is not valid ${step}`, { cause });
  }
}

/** Refuses early, with a reason jose would not give: jose parses the token again. */
function checkStructure(token: string): void {
  if (token.length === 0) throw malformed("empty token");
  // Any character outside base64url and "." is refused below, so the length
  // in UTF-16 code units equals the length in bytes for every token that can
  // pass; a longer string is refused before it is looked at further.
  if (token.length > MAX_TOKEN_BYTES) {
    throw malformed(`token longer than ${MAX_TOKEN_BYTES} bytes`);
  }
  const segments = token.split(".");
  if (segments.length !== 3) {
    throw malformed(
      segments.length === 5
        ? "5 segments (a JWE, not a JWS)"
        : `${segments.length} segment(s), expected 3`,
    );
  }
  for (const [i, segment] of segments.entries()) {
    const label = SEGMENTS[i];
    // An empty signature is refused after the header, so an `alg: none` token is logged as such.
    if (segment.length === 0 && label !== "signature") {
      throw malformed(`empty ${label}`);
    }
    if (!BASE64URL.test(segment)) {
      throw malformed(`${label} has characters outside base64url`);
    }
    if (segment.length % 4 === 1) {
      throw malformed(`${label} has an impossible base64url length`);
    }
  }
  const header = decodeHeader(segments[0]!);
  if (typeof header !== "object" || header === null || Array.isArray(header)) {
    throw malformed("header is not an object");
  }
  const alg: unknown = (header as Record<string, unknown>)["alg"];
  if (typeof alg !== "string") throw malformed("alg missing or not a string");
  if (alg !== ALGORITHM) {
    // Fixed set of names so a crafted alg cannot write into the log. Another
    // algorithm is a signature we refuse to check (none, downgrade, confusion).
    throw new TokenError(
      "signature",
      /^[A-Za-z0-9]{1,10}$/.test(alg)
        ? `alg ${alg} not allowed, expected ${ALGORITHM}`
        : `alg not allowed, expected ${ALGORITHM}`,
    );
  }
  if (Object.hasOwn(header, "crit")) {
    throw malformed("crit header present (no extension is understood)");
  }
  // jose reads b64 only when crit names it.
  if (Object.hasOwn(header, "b64")) {
    throw malformed("b64 header present (unencoded payloads refused)");
  }
  if (segments[2] === "") throw new TokenError("signature", "empty signature");
  // kid, jku, x5u, jwk and x5c are ignored on purpose: the key never comes from the token.
}

/**
 * jose accepts an infinite time, floors the clock (which makes its own `nbf`
 * check the stricter one) and checks `iat` only against a maximum age.
 */
function checkTimes(claims: JWTPayload, now: number, leeway: number): void {
  for (const claim of ["exp", "nbf", "iat"] as const) {
    const value = claims[claim];
    if (value !== undefined && !Number.isFinite(value)) {
      throw new TokenError("claims", `${claim} is not a finite number`);
    }
  }
  const { exp, iat } = claims;
  // jose has checked that `exp` is present.
  if (!(exp! > now - leeway)) throw new TokenError("expired", "expired (exp)");
  if (iat !== undefined && iat > now + leeway) {
    throw new TokenError("claims", "issued in the future (iat)");
  }
}

const JOSE_FAILURES = new Map<string, AuthFailureReason>([
  ["ERR_JWS_SIGNATURE_VERIFICATION_FAILED", "signature"],
  ["ERR_JWT_EXPIRED", "expired"],
  ["ERR_JWT_CLAIM_VALIDATION_FAILED", "claims"],
  ["ERR_JWS_INVALID", "malformed"],
  ["ERR_JWT_INVALID", "malformed"],
]);

/** jose throws `TypeError` and WebCrypto `DOMException` too, not only `JOSEError`. */
function fromJose(cause: unknown): TokenError {
  if (!(cause instanceof errors.JOSEError)) {
    const reason = cause instanceof Error
      ? `${cause.name} while verifying`
      : "unknown failure while verifying";
    return new TokenError("other", reason, { cause });
  }
  const kind = JOSE_FAILURES.get(cause.code) ?? "other";
  // jose messages are fixed strings that never quote the token.
  return new TokenError(kind, `${cause.code}: ${cause.message}`, { cause });
}

/** Every failure, whatever threw it, comes out as a {@linkcode TokenError}. */
export async function verifyToken(
  token: string,
  key: CryptoKey,
  options: VerifyTokenOptions,
): Promise<JWTPayload> {
  checkStructure(token);
  const now = options.now ?? Date.now() / 1000;
  const { payload } = await jwtVerify(token, key, {
    algorithms: [ALGORITHM],
    issuer: options.issuer,
    audience: options.audience,
    requiredClaims: ["exp"],
    clockTolerance: options.leewaySeconds,
    currentDate: new Date(now * 1000),
  }).catch((cause: unknown) => {
    throw fromJose(cause);
  });
  checkTimes(payload, now, options.leewaySeconds);
  return payload;
}
