/**
 * What wraps the management API's handler, whatever serves it: HS512 JWT
 * authentication ({@linkcode AuthMiddleware}), the security headers
 * ({@linkcode withSecurityHeaders}) and the TLS pair read from `ssl/`
 * ({@linkcode SSLConfig}).
 *
 * @example Protect a handler and serve it over HTTPS when certificates exist
 * ```ts
 * import {
 *   AuthMiddleware,
 *   SSLConfig,
 *   withSecurityHeaders,
 * } from "@mymodel/serve/web";
 *
 * const auth = new AuthMiddleware({
 *   secret: "a shared secret of at least 64 bytes, as HS512 wants, ...........",
 *   issuer: "https://idp.example",
 * });
 * const tls = await SSLConfig.fromDirectory(Deno.cwd());
 * const handler = withSecurityHeaders(
 *   auth.wrap(() => new Response("ok")),
 *   { https: tls !== undefined },
 * );
 * const tlsOptions = tls ? { cert: tls.cert, key: tls.key } : {};
 * await using server = Deno.serve(
 *   { hostname: "127.0.0.1", port: 0, onListen: () => {}, ...tlsOptions },
 *   handler,
 * );
 * ```
 *
 * @module
 */

export { type Handler, withSecurityHeaders } from "./web/security_headers.ts";
export { AuthMiddleware, type AuthOptions } from "./web/auth_middleware.ts";
export type { AuthFailureReason, AuthFailures } from "./web/auth_failures.ts";
export { SSLConfig, type SSLConfigOptions } from "./web/ssl_config.ts";
