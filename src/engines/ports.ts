/**
 * Ports: whether one is free, and the start-up error when it is not. Used at
 * start (the management port and every engine port) and before each restart.
 *
 * @module
 */
import { ConfigError } from "../common/config_error.ts";
import { portHolders } from "./port_holder.ts";

/** True when nothing listens on the port (a restart checks before it starts). */
export function isPortFree(hostname: string, port: number): boolean {
  try {
    Deno.listen({ hostname, port }).close();
    return true;
  } catch {
    return false;
  }
}

/**
 * Fails when something already listens on a port we are about to use. The
 * message says who holds it, when `/proc` tells, and how to move.
 *
 * @param hostname The host the port is for.
 * @param port The port.
 * @param what What the port is for (`the management API`, `engine llama-3`).
 * @throws {ConfigError} `Cannot use port 5000 on localhost for the management API: already in use by pid 4711 (python3) (expected a free port: stop that process, or choose another with --port)`.
 */
export function checkPortFree(
  hostname: string,
  port: number,
  what: string,
): void {
  let listener: Deno.Listener;
  try {
    listener = Deno.listen({ hostname, port });
  } catch (cause) {
    throw new ConfigError(
      `Cannot use port ${port} on ${hostname} for ${what}: ${
        cause instanceof Deno.errors.AddrInUse
          ? inUse(port, what)
          : (cause as Error).message
      }`,
      { cause },
    );
  }
  listener.close();
}

/** `already in use [by pid N (name)] (expected …)`: who holds it and what to do. */
function inUse(port: number, what: string): string {
  const holders = portHolders(port);
  const by = holders.length === 0
    ? ""
    : ` by ${
      holders.slice(0, 3).map((h) =>
        `pid ${h.pid}${h.command ? ` (${h.command})` : ""}`
      ).join(", ")
    }${holders.length > 3 ? ` and ${holders.length - 3} more` : ""}`;
  const stop = holders.length === 0
    ? ""
    : holders.length === 1
    ? "stop that process, or "
    : "stop those processes, or ";
  // Engines take the ports after --port, so moving --port moves them too.
  const move = what.startsWith("engine ")
    ? "move the block with --port (engines listen on --port+1, --port+2, ...)"
    : "choose another with --port";
  return `already in use${by} (expected a free port: ${stop}${move})`;
}
