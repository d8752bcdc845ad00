/**
 * The baseline for `deno task bench`: a bare `Deno.serve` answering every
 * request with the same constant JSON as the launcher's `GET /health` with one
 * engine. Usage: `deno run --allow-net bench/servers/bare_server.ts PORT [--guard]`;
 * with `--guard` the same handler is served behind the connection guard
 * (`src/http/connection_guard.ts`), to measure what the guard costs.
 *
 * It prints `listening on http://127.0.0.1:PORT` on stderr once it listens,
 * like the launcher, so both are timed the same way.
 *
 * @module
 */
import { GuardedServer } from "../../src/http/connection_guard.ts";
import { SEMIOSERVE_DEFAULTS } from "../../src/serve/config.ts";

const BODY = JSON.stringify({ status: "ok", models: 1 });

function handler(): Response {
  return new Response(BODY, {
    headers: { "content-type": "application/json" },
  });
}

const port = Number(Deno.args[0] ?? "0");
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`Cannot use port '${Deno.args[0]}': expected 0..65535`);
  Deno.exit(2);
}

function onListen(addr: Deno.NetAddr): void {
  console.error(`listening on http://127.0.0.1:${addr.port}`);
}

if (Deno.args.includes("--guard")) {
  // The launcher's limits, as it serves the API with no flags.
  const { headerTimeoutMs, idleTimeoutMs, maxConnections } =
    SEMIOSERVE_DEFAULTS;
  new GuardedServer({
    hostname: "127.0.0.1",
    port,
    handler,
    onListen,
    headerTimeoutMs,
    idleTimeoutMs,
    maxConnections,
  });
} else {
  Deno.serve({ hostname: "127.0.0.1", port, onListen }, handler);
}
