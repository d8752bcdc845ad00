/**
 * The one token a request carries: `Authorization: Bearer <token>`, or
 * `?auth=<token>` on a websocket upgrade, never both. A reason never quotes
 * the credentials.
 *
 * @module
 */
import type { AuthFailureReason } from "./auth_failures.ts";

export type Credentials =
  | { token: string }
  | { reason: string; kind: AuthFailureReason };

// One or more spaces (RFC 6750: 1*SP); what follows is checked by the token
// layer, so a stray space or tab inside is refused there with a clear reason.
const BEARER = /^bearer +(.+)$/i;

function missing(reason: string): Credentials {
  return { reason, kind: "missing" };
}

function malformed(reason: string): Credentials {
  return { reason, kind: "malformed" };
}

export function extractToken(req: Request): Credentials {
  const authorization = req.headers.get("authorization");
  const query = new URL(req.url).searchParams.getAll("auth");
  const upgrade =
    req.headers.get("upgrade")?.trim().toLowerCase() === "websocket";

  if (query.length > 0 && !upgrade) {
    return malformed("auth query parameter on a plain HTTP request");
  }
  if (query.length > 0 && authorization !== null) {
    return malformed(
      "token both in Authorization and in the auth query parameter",
    );
  }
  if (upgrade) {
    if (query.length === 0) {
      return missing("websocket upgrade without the auth query parameter");
    }
    if (query.length > 1) return malformed("several auth query parameters");
    const token = query[0] ?? "";
    return token === "" ? missing("empty auth query parameter") : { token };
  }
  if (authorization === null) return missing("no Authorization header");
  // Fetch joins repeated headers with ", "; a JWT never holds a comma.
  if (authorization.includes(",")) {
    return malformed("several Authorization headers");
  }
  const match = BEARER.exec(authorization);
  if (match === null) {
    if (/^bearer$/i.test(authorization)) {
      return missing("Bearer scheme without a token");
    }
    return /^bearer\b/i.test(authorization)
      ? malformed("malformed Bearer credentials (expected one or more spaces)")
      : missing("Authorization scheme is not Bearer");
  }
  return { token: match[1] ?? "" };
}
