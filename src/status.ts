/**
 * The status view: every engine of a running launcher, one row each, like
 * `ollama ps` or `docker ps`. It asks `GET /models?detail=1` on the management
 * API, over HTTPS when the launcher's directory holds its certificate pair,
 * with a production token from `NUCLEUS_TOKEN` or `--token-file`.
 *
 * ```sh
 * deno run -A jsr:@mymodel/serve/status --port 5000
 * deno task status --watch 2
 * deno task status --check || page-someone   # exit 3: an engine is not healthy
 * ```
 *
 * ```
 * MODEL    VERB   STATE     HEALTHY   PID     GPUS   RESTARTS   SINCE    LAST EXIT          URL
 * llama-3  chat   ready     yes       81234   0      0          4m ago   -                  http://localhost:5001/v1
 * bge-m3   embed  backoff   no        -       5      2          3s ago   code 3, 3s ago     http://localhost:5002/v1
 * ```
 *
 * Exit codes: 0 shown (with `--check`: every engine healthy), 1 the launcher
 * cannot be asked (one line says why), 2 a usage error, 3 an engine is not
 * healthy (`--check`).
 *
 * @example
 * ```ts
 * import { main } from "@mymodel/serve/status";
 * const code = await main(["--check", "--port", "5000"]);
 * if (code !== 0) console.error("an engine is not healthy, or no launcher");
 * ```
 *
 * @module
 */
import { main } from "./status/main.ts";

export { main };

if (import.meta.main) {
  Deno.exit(await main(Deno.args));
}
