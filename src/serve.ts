/**
 * The launcher: one engine subprocess per requested catalogue model, and the
 * management API (`GET /health`, `GET /models`) over them.
 *
 * @example Embed the launcher
 * ```ts ignore
 * import { Semioserve } from "@mymodel/serve/serve";
 *
 * const controller = new AbortController();
 * const serve = new Semioserve({
 *   models: ["llama-3", "EMBED:bge-m3"],
 *   port: 5000,
 *   directory: "/srv/mymodel",
 *   signal: controller.signal,
 * });
 * await serve.run(); // resolves after shutdown (SIGTERM, SIGINT, stop() or abort)
 * ```
 *
 * @module
 */
export { ServerProcess } from "./engines/server_process.ts";
export {
  type EnginePlan,
  type EngineSite,
  planEngine,
} from "./engines/engine_plan.ts";
export { OpsStance } from "./web/ops_stance.ts";
export type { SemioserveOptions } from "./serve/config.ts";
export type { EngineView } from "./supervision/engine_detail.ts";
export type { ExitCause, LoadPhase } from "./engines/kinds/engine_kind.ts";
export type { Footprint } from "./engines/footprint.ts";
export type { EngineState } from "./supervision/engine_state.ts";
export type { ReloadResult } from "./serve/diff.ts";
export { Semioserve } from "./serve/launcher.ts";
export type { StartPlan } from "./serve/start_plan.ts";
export { main } from "./serve/cli.ts";
