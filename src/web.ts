/**
 * Production authentication (HS512 JWT), security headers and TLS
 * configuration for the management API.
 *
 * - {@linkcode AuthMiddleware} wraps any `Deno.serve` handler: a request
 *   without a valid token gets a bare `401 Unauthorized` before any route runs.
 * - {@linkcode withSecurityHeaders} wraps any handler so every answer carries
 *   `X-Content-Type-Options`, `Cache-Control`, `Content-Security-Policy`,
 *   `X-Frame-Options`, and HSTS over HTTPS.
 * - {@linkcode SSLConfig} reads `ssl/server.crt` and `ssl/server.key` from a
 *   directory and checks they belong together, for `Deno.serve({ cert, key })`.
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
