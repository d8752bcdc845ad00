/**
 * The package's version, read from its own `deno.json` so that it cannot
 * drift from what is published (JSR ships `deno.json` with the package, and
 * a JSON import needs no read permission).
 *
 * @module
 */

import config from "../../deno.json" with { type: "json" };

/** The version of `@mymodel/serve`, e.g. `0.1.0`. */
export const VERSION: string = config.version;
