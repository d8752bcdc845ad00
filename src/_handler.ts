/**
 * The management API as a plain function of a `Request`: tests call it without
 * a socket, `Deno.serve` calls it with one.
 *
 * @module
 */
import { type ServerProcess, urlHost } from "./_server_process.ts";
import type { Handler } from "./web.ts";

/** What the management API reports on. */
export interface ManagementState {
  /** The configured engines, in request order. */
  engines: readonly ServerProcess[];
  /** Every catalogue name. */
  catalogue: readonly string[];
  /** How long one engine's health poll may take, in milliseconds. */
  pollTimeoutMs: number;
}

/** One engine's entry in `GET /models`. */
export interface ActiveModel {
  verb: string;
  url: string;
  healthy: boolean;
}

const ALLOW = "GET, HEAD";

function json(
  body: unknown,
  status = 200,
  headers: HeadersInit = {},
): Response {
  return Response.json(body, { status, headers });
}

/** Engines bound to every interface are reported under the name the client used. */
function engineUrl(engine: ServerProcess, req: Request): string {
  const wildcard = ["0.0.0.0", "::", "[::]", ""].includes(engine.host);
  if (!wildcard) return engine.url;
  const host = new URL(req.url).hostname;
  return `http://${urlHost(host)}:${engine.port}/v1`;
}

/**
 * Builds the management API handler: `GET /health` and `GET /models`.
 *
 * @param state The engines and catalogue to report.
 * @returns A handler for `Deno.serve`.
 */
export function createManagementHandler(state: ManagementState): Handler {
  const catalogue = [...state.catalogue].sort();
  const health = JSON.stringify({
    status: "ok",
    models: state.engines.length,
  });

  async function models(req: Request): Promise<Response> {
    // Every poll runs at once, each with its own timeout: one hung engine costs one timeout.
    const healthy = await Promise.all(
      state.engines.map((engine) => engine.healthy(state.pollTimeoutMs)),
    );
    const active: Record<string, ActiveModel> = {};
    state.engines.forEach((engine, i) => {
      active[engine.name] = {
        verb: engine.card.verb,
        url: engineUrl(engine, req),
        healthy: healthy[i] === true,
      };
    });
    return json({ active, catalogue });
  }

  return async function managementHandler(req: Request): Promise<Response> {
    const { pathname } = new URL(req.url);
    if (pathname !== "/health" && pathname !== "/models") {
      return json({ error: "not found" }, 404);
    }
    if (req.method !== "GET" && req.method !== "HEAD") {
      return json({ error: "method not allowed" }, 405, { allow: ALLOW });
    }
    const response = pathname === "/health"
      ? new Response(health, {
        headers: { "content-type": "application/json" },
      })
      : await models(req);
    return req.method === "HEAD"
      ? new Response(null, { headers: response.headers })
      : response;
  };
}
