/**
 * What the production-mode rows of `deno task bench` send: a wrk script that
 * carries a token on every request, and an in-process measure of what the
 * security headers cost `/health`.
 *
 * @module
 */
import { SignJWT } from "jose";
import { writeWrkScript } from "./wrk.ts";
import { withSecurityHeaders } from "../../src/web/security_headers.ts";
import { createManagementHandler } from "../../src/http/handler.ts";

/** The production launcher's settings, known to the token minter. */
export const AUTH_ENV = {
  NUCLEUS_MODE: "production",
  IDP_SECRET:
    "bench-secret-that-is-at-least-sixty-four-bytes-long-0123456789ab",
  IDP_ISSUER: "https://idp.bench.example",
} as const;

/**
 * Mints one valid token, valid for an hour; `jti` makes each one distinct.
 *
 * @param jti A unique id.
 * @returns The compact JWS.
 */
export function mintToken(jti: string): Promise<string> {
  return new SignJWT({
    iss: AUTH_ENV.IDP_ISSUER,
    aud: "nexus",
    jti,
  })
    .setProtectedHeader({ alg: "HS512", typ: "JWT" })
    .setIssuedAt()
    .setExpirationTime("1h")
    .sign(new TextEncoder().encode(AUTH_ENV.IDP_SECRET));
}

/** The wrk script for production mode, and the token it sends. */
export interface AuthScripts {
  /** Sends the token on every request. */
  oneToken: string;
  /** The token `oneToken` sends. */
  token: string;
}

/**
 * Mints the token and writes the script into `dir`.
 *
 * @param dir The bench's work directory.
 * @returns The script's path and the token.
 */
export async function writeAuthScripts(dir: string): Promise<AuthScripts> {
  const token = await mintToken("reused");
  const oneToken = await writeWrkScript(
    dir,
    "one_token.lua",
    `wrk.headers["Authorization"] = "Bearer ${token}"`,
  );
  return { oneToken, token };
}

/** Nanoseconds per `/health` call of the management handler, in process. */
export interface HeaderCost {
  plain: number;
  withHeaders: number;
}

/**
 * Times the management handler's `/health` with and without the security
 * headers, alternating batches so drift hits both alike.
 *
 * @param calls Calls per variant.
 * @returns Median nanoseconds per call of each.
 */
export function measureHeaderCost(calls = 200_000): HeaderCost {
  const plain = createManagementHandler({
    engines: [],
    catalogue: [],
    pollTimeoutMs: 1_000,
  });
  const secured = withSecurityHeaders(plain, { https: false });
  const request = new Request("http://127.0.0.1:5000/health");
  const batch = 10_000;
  const samples = { plain: [] as number[], withHeaders: [] as number[] };
  for (let done = 0; done < calls; done += batch) {
    for (
      const [key, handler] of [["plain", plain], [
        "withHeaders",
        secured,
      ]] as const
    ) {
      const start = performance.now();
      for (let i = 0; i < batch; i++) handler(request);
      samples[key].push((performance.now() - start) * 1e6 / batch);
    }
  }
  function median(values: number[]): number {
    const sorted = [...values].sort((a, b) => a - b);
    return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
  }
  return {
    plain: median(samples.plain),
    withHeaders: median(samples.withHeaders),
  };
}
