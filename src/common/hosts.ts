/**
 * Hosts as the launcher, its engines and the status view write them.
 *
 * @module
 */

const WILDCARDS: ReadonlySet<string> = new Set(["0.0.0.0", "::", "[::]", ""]);

/** True for a host that binds every interface: it names no address a client can reach. */
export function isWildcardHost(host: string): boolean {
  return WILDCARDS.has(host);
}

/** Formats a host for a URL: IPv6 literals get brackets. */
export function urlHost(host: string): string {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
}
