/**
 * Imported first by `mod.ts`. When `mod.ts` runs as the program, an error
 * thrown while modules load (a bad `MY_LOCAL` in `common.ts`, say) becomes one
 * clear line and exit code 1 instead of a stack trace. Library users are not
 * affected: nothing is installed unless `mod.ts` is the main module.
 *
 * @module
 */

const INPUT_ERRORS = new Set([
  "ConfigError",
  "CatalogueError",
  "KeyError",
  "EngineError",
  "SSLConfigError",
  "AssertionError",
]);

function reportAndExit(event: PromiseRejectionEvent | ErrorEvent): void {
  event.preventDefault();
  const error = "reason" in event ? event.reason : event.error;
  const known = error instanceof Error && INPUT_ERRORS.has(error.name);
  const text = known
    ? error.message.replaceAll("\n", " ")
    : error instanceof Error
    ? error.stack ?? error.message
    : String(error);
  Deno.stderr.writeSync(new TextEncoder().encode(`[serve] error: ${text}\n`));
  Deno.exit(1);
}

if (Deno.mainModule === new URL("../../mod.ts", import.meta.url).href) {
  globalThis.addEventListener("unhandledrejection", reportAndExit);
  globalThis.addEventListener("error", reportAndExit);
}
