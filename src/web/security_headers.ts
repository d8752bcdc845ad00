import { log } from "../common/log.ts";

/** A `Deno.serve` handler; `info` is optional so tests can pass a bare `Request`. */
export type Handler = (
  req: Request,
  info?: Deno.ServeHandlerInfo,
) => Response | Promise<Response>;

const SECURITY_HEADERS = Object.entries({
  "x-content-type-options": "nosniff",
  "cache-control": "no-store",
  "content-security-policy": "default-src 'none'; frame-ancestors 'none'",
  "x-frame-options": "DENY",
});

export function setSecurityHeaders(headers: Headers, https: boolean): void {
  for (const [name, value] of SECURITY_HEADERS) headers.set(name, value);
  // Over HTTPS only: a browser must not take HSTS from plain HTTP.
  if (https) headers.set("strict-transport-security", "max-age=31536000");
}

/** On a copy where the headers are immutable (`Response.error()`, `redirect()`, fetched responses). */
function secureResponse(response: Response, https: boolean): Response {
  try {
    setSecurityHeaders(response.headers, https);
    return response;
  } catch {
    return secureResponse(new Response(response.body, response), https);
  }
}

/** The path of a request URL, for a log line: the query may hold `auth=<token>`. */
export function loggedPath(url: string): string {
  return new URL(url).pathname;
}

function internalError(req: Request, error: unknown): Response {
  // An Error reads `<name>: <message>`.
  const what = String(error).replace(/\s+/g, " ");
  log.error(`500 ${req.method} ${loggedPath(req.url)}: ${what}`);
  const headers = { "content-type": "text/plain" };
  return new Response("Internal Server Error", { status: 500, headers });
}

/**
 * Wraps a handler so every answer carries the security headers (OWASP's REST
 * guidance; HSTS over HTTPS), a `500` for an exception included (logged in
 * one line, without the query). A synchronous handler stays synchronous.
 *
 * @example
 * ```ts
 * import { withSecurityHeaders } from "@mymodel/serve/web";
 * const handler = withSecurityHeaders(() => new Response("ok"), { https: false });
 * ```
 */
export function withSecurityHeaders(
  handler: Handler,
  { https }: { https: boolean },
): Handler {
  return function securityHeaders(
    req: Request,
    info?: Deno.ServeHandlerInfo,
  ): Response | Promise<Response> {
    let result: Response | Promise<Response>;
    try {
      result = handler(req, info);
    } catch (error) {
      result = internalError(req, error);
    }
    if (result instanceof Response) return secureResponse(result, https);
    return result.catch((error: unknown) => internalError(req, error))
      .then((response) => secureResponse(response, https));
  };
}
