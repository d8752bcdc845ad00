/**
 * The root directory's layout, checked before anything starts (the port
 * checks are in `engines/ports.ts`).
 *
 * @module
 */
import { AssertionError } from "node:assert";
import { checkDirectory, ROOT_SUBDIRECTORIES } from "../common/settings.ts";

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
