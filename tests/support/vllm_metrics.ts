/** A stand-in vLLM's `/metrics` for tests that drive an engine run by hand. */
import { metricsText } from "../fixtures/engine_metrics.ts";

/** What the stand-in's `/metrics` says, read at each request: set `running` to move it. */
export interface Served {
  running: number;
  generated: number;
}

/**
 * Serves `/metrics` as vLLM writes it from `served` at a loopback port.
 *
 * ```ts ignore
 * const served = { running: 1, generated: 5 };
 * const server = vllmMetricsServer(served);
 * served.running = 0; // what is in flight is done
 * await server.shutdown();
 * ```
 */
export function vllmMetricsServer(
  served: Served,
): Deno.HttpServer<Deno.NetAddr> {
  return Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () =>
      new Response(
        metricsText("vllm", {
          running: served.running,
          waiting: 0,
          prompt: served.generated,
          generated: served.generated,
          model: "m",
        }),
      ),
  );
}
