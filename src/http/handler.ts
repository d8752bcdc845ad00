/**
 * The management API as a plain function of a `Request`. In `http/`, the
 * connection guard knows nothing of routes, the handler nothing of how
 * engines are started.
 *
 * @module
 */
import { isWildcardHost, urlHost } from "../common/settings.ts";
import type { EngineDetail } from "../supervision/engine_detail.ts";
import type { EngineRun } from "../supervision/engine_run.ts";
import type { Handler } from "../web.ts";

export interface ManagementState {
  engines: readonly EngineRun[];
  /** Every catalogue name; read per request, so a reload may replace it. */
  catalogue: readonly string[];
  pollTimeoutMs: number;
}

/** With `?detail=1`, the supervision facts too. */
export interface ActiveModel extends Partial<EngineDetail> {
  verb: string;
  url: string;
  healthy: boolean;
}

const JSON_HEADERS = { "content-type": "application/json" };

/** Engines bound to every interface are reported under the name the client used. */
function engineUrl(engine: EngineRun, url: URL): string {
  const { host, port } = engine.plan;
  if (!isWildcardHost(host)) return engine.plan.url;
  return `http://${urlHost(url.hostname)}:${port}/v1`;
}

export function createManagementHandler(state: ManagementState): Handler {
  const health = JSON.stringify({ status: "ok", models: state.engines.length });

  async function models(url: URL): Promise<Response> {
    // Every poll runs at once, each with its own timeout: one hung engine costs one timeout.
    const healthy = await Promise.all(
      state.engines.map((engine) => engine.healthy(state.pollTimeoutMs)),
    );
    // `?detail=1` (or `true`); the plain answer keeps the specification's shape.
    const detail = /^(1|true)$/.test(url.searchParams.get("detail") ?? "");
    const active = Object.fromEntries(state.engines.map((engine, i) => {
      const entry: ActiveModel = {
        verb: engine.plan.card.verb,
        url: engineUrl(engine, url),
        healthy: healthy[i] === true,
      };
      return [engine.name, detail ? { ...entry, ...engine.detail() } : entry];
    }));
    return Response.json({ active, catalogue: [...state.catalogue].sort() });
  }

  // Synchronous for /health: no promise per request on the hottest path.
  return function managementHandler(
    req: Request,
  ): Response | Promise<Response> {
    const url = new URL(req.url);
    const path = url.pathname;
    if (path !== "/health" && path !== "/models") {
      return Response.json({ error: "not found" }, { status: 404 });
    }
    const head = req.method === "HEAD";
    if (req.method !== "GET" && !head) {
      const allow = { status: 405, headers: { allow: "GET, HEAD" } };
      return Response.json({ error: "method not allowed" }, allow);
    }
    if (path === "/health") {
      return new Response(head ? null : health, { headers: JSON_HEADERS });
    }
    return head
      ? models(url).then((r) => new Response(null, { headers: r.headers }))
      : models(url);
  };
}
