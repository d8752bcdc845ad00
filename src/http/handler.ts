/**
 * The management API as a plain function of a `Request`: tests call it without
 * a socket, `Deno.serve` calls it with one.
 *
 * Folder `http/`: the management API's front: the handler, the connection
 * guard and its internal server, the open-files limit. The guard knows
 * sockets, not routes; the handler knows nothing of how engines are started.
 *
 * @module
 */
import { isWildcardHost, urlHost } from "../common/settings.ts";
import type { EngineDetail } from "../supervision/engine_detail.ts";
import type { EngineRun } from "../supervision/engine_run.ts";
import type { Handler } from "../web.ts";

/** What the management API reports on. */
export interface ManagementState {
  /** The configured engines, in request order. */
  engines: readonly EngineRun[];
  /** Every catalogue name; read per request, so a reload may replace it. */
  catalogue: readonly string[];
  /** How long one engine's health poll may take, in milliseconds. */
  pollTimeoutMs: number;
}

/** One engine's entry in `GET /models` (with `?detail=1`, its supervision facts too). */
export interface ActiveModel extends Partial<EngineDetail> {
  verb: string;
  url: string;
  healthy: boolean;
}

const ALLOW = "GET, HEAD";
const JSON_HEADERS = { "content-type": "application/json" };

function json(
  body: unknown,
  status = 200,
  headers: HeadersInit = {},
): Response {
  return Response.json(body, { status, headers });
}

/** Engines bound to every interface are reported under the name the client used. */
function engineUrl(engine: EngineRun, url: URL): string {
  if (!isWildcardHost(engine.host)) return engine.url;
  return `http://${urlHost(url.hostname)}:${engine.port}/v1`;
}

/**
 * Builds the management API handler: `GET /health` and `GET /models`.
 *
 * @param state The engines and catalogue to report.
 * @returns A handler for `Deno.serve`.
 */
export function createManagementHandler(state: ManagementState): Handler {
  const health = JSON.stringify({
    status: "ok",
    models: state.engines.length,
  });

  async function models(url: URL): Promise<Response> {
    // Every poll runs at once, each with its own timeout: one hung engine costs one timeout.
    const healthy = await Promise.all(
      state.engines.map((engine) => engine.healthy(state.pollTimeoutMs)),
    );
    // `?detail=1` (or `true`); the plain answer keeps the specification's shape.
    const detail = ["1", "true"].includes(
      url.searchParams.get("detail") ?? "",
    );
    const active: Record<string, ActiveModel> = {};
    state.engines.forEach((engine, i) => {
      const entry: ActiveModel = {
        verb: engine.card.verb,
        url: engineUrl(engine, url),
        healthy: healthy[i] === true,
      };
      active[engine.name] = detail ? { ...entry, ...engine.detail() } : entry;
    });
    return json({ active, catalogue: [...state.catalogue].sort() });
  }

  // Synchronous for /health: no promise per request on the hottest path.
  return function managementHandler(
    req: Request,
  ): Response | Promise<Response> {
    const url = new URL(req.url);
    const path = url.pathname;
    if (path !== "/health" && path !== "/models") {
      return json({ error: "not found" }, 404);
    }
    const head = req.method === "HEAD";
    if (req.method !== "GET" && !head) {
      return json({ error: "method not allowed" }, 405, { allow: ALLOW });
    }
    if (path === "/health") {
      return new Response(head ? null : health, { headers: JSON_HEADERS });
    }
    return head
      ? models(url).then((r) => new Response(null, { headers: r.headers }))
      : models(url);
  };
}
