import { ConfigError } from "../common/config_error.ts";
import { portHolders } from "./port_holder.ts";

export function isPortFree(hostname: string, port: number): boolean {
  try {
    Deno.listen({ hostname, port }).close();
    return true;
  } catch {
    return false;
  }
}

/** @throws {ConfigError} `Cannot use port 5000 on localhost for the management API: already in use by pid 4711 (python3) (expected a free port: stop that process, or choose another with --port)` */
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
