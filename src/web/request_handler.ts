/**
 * The handler shape every wrapper in `web` takes and returns.
 *
 * @module
 */

/**
 * A request handler, shaped like the one `Deno.serve` takes; `info` is
 * optional so tests can call it with a bare `Request`.
 */
export type Handler = (
  req: Request,
  info?: Deno.ServeHandlerInfo,
) => Response | Promise<Response>;
