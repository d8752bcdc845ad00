/**
 * Finds the one token a request carries: `Authorization: Bearer <token>` on
 * plain HTTP requests, `?auth=<token>` on websocket upgrades, never both.
 * What is wrong with the credentials is said without quoting them.
 *
 * @module
 */

import type { AuthFailureReason } from "./auth_failures.ts";

/** The token a request carries, or why it carries none (or too many). */
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

/**
 * Picks the one token a request carries, or explains (for the log) why it
 * carries none or too many. Never returns a part of the token in a reason.
 *
 * @param req The request.
 * @returns The token, or the reason and its kind.
 */
export function extractToken(req: Request): Credentials {
  const authorization = req.headers.get("authorization");
  // A Request's URL always parses: the Request constructor checked it.
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
