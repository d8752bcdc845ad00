/**
 * What the production-mode rows of `deno task bench` send: wrk scripts that
 * carry one reused token or a fresh one on every request, and an in-process
 * measure of what the security headers cost `/health`.
 *
 * @module
 */
import { SignJWT } from "jose";
import { writeWrkScript } from "./wrk.ts";
import { withSecurityHeaders } from "../../src/web.ts";
import { createManagementHandler } from "../../src/http/handler.ts";

/** The production launcher's settings, known to the token minter. */
export const AUTH_ENV = {
  NUCLEUS_MODE: "production",
  IDP_SECRET:
    "bench-secret-that-is-at-least-sixty-four-bytes-long-0123456789ab",
  IDP_ISSUER: "https://idp.bench.example",
} as const;

/**
 * More distinct tokens than the cache holds (1,024), sent in a cycle: with
 * least-recently-used eviction every request misses, as a fresh token would.
 */
export const FRESH_TOKENS = 20_000;

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

/** wrk scripts for production mode, and a token to poll with. */
export interface AuthScripts {
  /** Sends one token on every request. */
  oneToken: string;
  /** Sends the next of {@linkcode FRESH_TOKENS} tokens on every request. */
  freshToken: string;
  /** The token `oneToken` sends. */
  token: string;
}

/**
 * Mints the tokens and writes both scripts into `dir`.
 *
 * @param dir The bench's work directory.
 * @returns The scripts' paths and the reused token.
 */
export async function writeAuthScripts(dir: string): Promise<AuthScripts> {
  const token = await mintToken("reused");
  const tokens: string[] = [];
  for (let i = 0; i < FRESH_TOKENS; i++) tokens.push(await mintToken(`t${i}`));
  const list = `${dir}/tokens.txt`;
  await Deno.writeTextFile(list, `${tokens.join("\n")}\n`);
  const oneToken = await writeWrkScript(
    dir,
    "one_token.lua",
    `wrk.headers["Authorization"] = "Bearer ${token}"`,
  );
  // Each wrk thread has its own Lua state: thread n starts n/threads of the
  // way along, so two threads never send the same token close together.
  const freshToken = await writeWrkScript(
    dir,
    "fresh_token.lua",
    `local threads = 0
setup = function(thread)
  thread:set("index", threads)
  threads = threads + 1
end
local tokens = {}
local i = 0
init = function(args)
  for line in io.lines("${list}") do tokens[#tokens + 1] = line end
  i = (index or 0) * math.floor(#tokens / 2)
end
request = function()
  i = i % #tokens + 1
  return wrk.format(nil, nil, { Authorization = "Bearer " .. tokens[i] })
end`,
  );
  return { oneToken, freshToken, token };
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
