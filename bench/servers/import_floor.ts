/**
 * The memory floor of the launcher's code: a Deno process that imports every
 * module the launcher runs (`mod.ts` and what it imports) and then only
 * waits. Its RSS is what the runtime and the code cost before any engine,
 * socket or request. Prints `listening on` (nothing listens) so the bench
 * times it like the servers.
 *
 * @module
 */
import "../../mod.ts";

console.error("listening on (nothing: modules loaded)");
setInterval(() => {}, 1 << 30);
