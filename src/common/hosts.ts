/**
 * Hosts as the launcher, its engines and the status view write them.
 *
 * @module
 */

const WILDCARDS: ReadonlySet<string> = new Set(["0.0.0.0", "::", "[::]", ""]);

/**
 * True for a host that binds every interface (`0.0.0.0`, `::`, `[::]`, or
 * empty): it names no address a client can reach.
 *
 * @param host The host as given.
 * @returns Whether it is a wildcard.
 *
 * @example
 * ```ts
 * import { isWildcardHost } from "./hosts.ts";
 * console.assert(isWildcardHost("0.0.0.0") && !isWildcardHost("localhost"));
 * ```
 */
export function isWildcardHost(host: string): boolean {
  return WILDCARDS.has(host);
}

/**
 * Formats a host for a URL: IPv6 literals get brackets.
 *
 * @param host The host as given.
 * @returns The host as a URL writes it.
 *
 * @example
 * ```ts
 * import { urlHost } from "./hosts.ts";
 * console.assert(urlHost("::1") === "[::1]");
 * ```
 */
export function urlHost(host: string): string {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
}
