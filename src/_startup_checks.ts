/**
 * Start-up checks of the launcher's surroundings: the root directory's layout
 * and free ports. They run before anything starts.
 *
 * @module
 */
import { AssertionError } from "node:assert";
import { checkDirectory, ConfigError, ROOT_SUBDIRECTORIES } from "./common.ts";

/**
 * Checks the root directory holds `models`, `logs`, `metrics` and `data`.
 *
 * @throws {AssertionError} Naming what is missing and how to create it.
 */
export function checkRoot(directory: string): void {
  checkDirectory(directory, "--directory");
  const missing = ROOT_SUBDIRECTORIES.filter((sub) => {
    try {
      return !Deno.statSync(`${directory}/${sub}`).isDirectory;
    } catch {
      return true;
    }
  });
  if (missing.length > 0) {
    const paths = missing.map((sub) => `${directory}/${sub}`);
    throw new AssertionError({
      message: `Cannot use root directory ${directory}: missing ${
        missing.join(", ")
      } (create with: mkdir -p ${paths.join(" ")})`,
    });
  }
}

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
