/**
 * A small, independent JWT encoder for tests: it shares no code with jose nor
 * with `src/web/jwt.ts`, so it can build the malformed tokens a real issuer never
 * would (odd headers, raw payload text, bad UTF-8, wrong segment counts,
 * signatures made with the wrong algorithm).
 *
 * @module
 */

const encoder = new TextEncoder();

/** Base64url without padding (RFC 7515, section 2), written out by hand. */
export function base64url(input: string | Uint8Array): string {
  const bytes = typeof input === "string" ? encoder.encode(input) : input;
  const alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  let out = "";
  for (let i = 0; i < bytes.length; i += 3) {
    const a = bytes[i] ?? 0;
    const b = bytes[i + 1] ?? 0;
    const c = bytes[i + 2] ?? 0;
    const triple = (a << 16) | (b << 8) | c;
    const left = bytes.length - i;
    out += alphabet[(triple >> 18) & 63];
    out += alphabet[(triple >> 12) & 63];
    if (left > 1) out += alphabet[(triple >> 6) & 63];
    if (left > 2) out += alphabet[triple & 63];
  }
  return out;
}

/** One of the first two segments, described by how it should be produced. */
export type Part =
  /** Any value, through `JSON.stringify`. */
  | { json: unknown }
  /** Text as it is (e.g. `{"exp":1e400}` or broken JSON), UTF-8 encoded. */
  | { text: string }
  /** Arbitrary bytes (e.g. invalid UTF-8). */
  | { bytes: Uint8Array }
  /** Already encoded: copied verbatim into the token. */
  | { encoded: string };

/** The HMAC hashes the encoder can sign with. */
export type HmacHash = "SHA-256" | "SHA-384" | "SHA-512";

/** What {@linkcode encodeJwt} builds. */
export interface EncodeOptions {
  header: Part;
  payload: Part;
  /** HMAC secret (UTF-8 bytes); without it and `signature`, the signature is empty. */
  secret?: string;
  /** @default "SHA-512" */
  hash?: HmacHash;
  /** A signature segment copied verbatim instead of computing one. */
  signature?: string;
}

function encodePart(part: Part): string {
  if ("encoded" in part) return part.encoded;
  if ("bytes" in part) return base64url(part.bytes);
  if ("text" in part) return base64url(part.text);
  return base64url(JSON.stringify(part.json));
}

/** HMAC over `signingInput` with `secret`, base64url encoded. */
export async function hmac(
  signingInput: string,
  secret: string,
  hash: HmacHash = "SHA-512",
): Promise<string> {
  const key = await crypto.subtle.importKey(
    "raw",
    encoder.encode(secret),
    { name: "HMAC", hash },
    false,
    ["sign"],
  );
  const mac = await crypto.subtle.sign(
    "HMAC",
    key,
    encoder.encode(signingInput),
  );
  return base64url(new Uint8Array(mac));
}

/** Builds a three-segment compact token from the given parts. */
export async function encodeJwt(options: EncodeOptions): Promise<string> {
  const signingInput = `${encodePart(options.header)}.${
    encodePart(options.payload)
  }`;
  let signature = "";
  if (options.signature !== undefined) signature = options.signature;
  else if (options.secret !== undefined) {
    signature = await hmac(signingInput, options.secret, options.hash);
  }
  return `${signingInput}.${signature}`;
}

/** Shorthand: JSON header and payload, HMAC signed. */
export function signJwt(
  header: unknown,
  payload: unknown,
  secret: string,
  hash: HmacHash = "SHA-512",
): Promise<string> {
  return encodeJwt({
    header: { json: header },
    payload: { json: payload },
    secret,
    hash,
  });
}
