/**
 * Ports: whether one is free, and the start-up error when it is not. Used at
 * start (the management port and every engine port) and before each restart.
 *
 * @module
 */
import { ConfigError } from "../common.ts";

/** True when nothing listens on the port (a restart checks before it starts). */
export function isPortFree(hostname: string, port: number): boolean {
  try {
    Deno.listen({ hostname, port }).close();
    return true;
  } catch {
    return false;
  }
}

/** Fails when something already listens on a port we are about to use. */
export function checkPortFree(
  hostname: string,
  port: number,
  what: string,
): void {
  let listener: Deno.Listener;
  try {
    listener = Deno.listen({ hostname, port });
  } catch (cause) {
    const reason = cause instanceof Deno.errors.AddrInUse
      ? "already in use"
      : (cause as Error).message;
    throw new ConfigError(
      `Cannot use port ${port} on ${hostname} for ${what}: ${reason}`,
      { cause },
    );
  }
  listener.close();
}
