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
import type { EngineSupervisor } from "../supervision/supervisor.ts";
import type { Handler } from "../web.ts";

/** What the management API reports on. */
export interface ManagementState {
  /** The configured engines, in request order. */
  engines: readonly EngineSupervisor[];
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
function engineUrl(engine: EngineSupervisor, req: Request): string {
  if (!isWildcardHost(engine.host)) return engine.url;
  const host = new URL(req.url).hostname;
  return `http://${urlHost(host)}:${engine.port}/v1`;
}

/**
 * The path of an absolute request URL, without query or fragment. Cheaper than
 * `new URL()` on the hot path; request URLs from `Deno.serve` are normalized.
 */
function pathOf(url: string): string {
  const start = url.indexOf("/", url.indexOf("//") + 2);
  if (start < 0) return "/";
  let end = url.length;
  for (const mark of ["?", "#"]) {
    const i = url.indexOf(mark, start);
    if (i >= 0 && i < end) end = i;
  }
  return url.slice(start, end);
}

/** True for `?detail=1` (or `true`); the plain answer keeps the specification's shape. */
function wantsDetail(url: string): boolean {
  const query = url.indexOf("?");
  if (query < 0) return false;
  const value = new URLSearchParams(url.slice(query + 1).split("#")[0])
    .get("detail");
  return value === "1" || value === "true";
}

/**
 * Builds the management API handler: `GET /health` and `GET /models`.
 *
 * @param state The engines and catalogue to report.
 * @returns A handler for `Deno.serve`.
 */
export function createManagementHandler(state: ManagementState): Handler {
  let names = state.catalogue;
  let catalogue = [...names].sort();
  const health = JSON.stringify({
    status: "ok",
    models: state.engines.length,
  });

  async function models(req: Request): Promise<Response> {
    // Every poll runs at once, each with its own timeout: one hung engine costs one timeout.
    const healthy = await Promise.all(
      state.engines.map((engine) => engine.healthy(state.pollTimeoutMs)),
    );
    if (state.catalogue !== names) {
      names = state.catalogue;
      catalogue = [...names].sort();
    }
    const detail = wantsDetail(req.url);
    const active: Record<string, ActiveModel> = {};
    state.engines.forEach((engine, i) => {
      const entry: ActiveModel = {
        verb: engine.card.verb,
        url: engineUrl(engine, req),
        healthy: healthy[i] === true,
      };
      active[engine.name] = detail ? { ...entry, ...engine.detail() } : entry;
    });
    return json({ active, catalogue });
  }

  // Synchronous for /health: no promise per request on the hottest path.
  return function managementHandler(
    req: Request,
  ): Response | Promise<Response> {
    const path = pathOf(req.url);
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
      ? models(req).then((r) => new Response(null, { headers: r.headers }))
      : models(req);
  };
}
