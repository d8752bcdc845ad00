/**
 * **@mymodel/serve** launches one inference-engine subprocess (vLLM by default;
 * llama.cpp, SGLang or any command) per catalogue model and serves a small
 * management API over them: `GET /health` and `GET /models`.
 *
 * Run it:
 *
 * ```sh
 * deno run -A jsr:@mymodel/serve llama-3 bge-m3 --port 5000 --directory /srv/mymodel
 * ```
 *
 * Or embed it:
 *
 * @example
 * ```ts ignore
 * import { Semioserve } from "@mymodel/serve";
 *
 * const serve = new Semioserve({ models: ["llama-3"], directory: "/srv/mymodel" });
 * await serve.run(); // until SIGTERM, SIGINT or serve.stop()
 * ```
 *
 * @module
 */
// First: its signal listeners are installed before any other module runs.
import "./src/serve/signals.ts";
import { main } from "./src/serve.ts";

export { Semioserve, ServerProcess } from "./src/serve.ts";

if (import.meta.main) {
  Deno.exit(await main(Deno.args));
}
