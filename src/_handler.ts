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
const JSON_HEADERS = { "content-type": "application/json" };

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
