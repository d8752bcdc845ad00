// The states of one engine, beside `EngineRun` (`engine_run.ts`), which moves
// it between them; docs/development.md has the table.

/**
 * The lifecycle states `GET /models?detail=1` reports. `waiting`: not spawned
 * yet, held by the GPU start gate; `draining`: a planned stop waits for the
 * requests in flight (`drain.ts`); `failed`: ended twice in a row for a cause
 * a restart cannot fix (bad arguments, model not found), tried again after
 * `--failed-retry` or at the next reload; `sleeping`: ready, its weights off
 * the GPU until a request wakes it (llama-server's `--sleep-idle-seconds`,
 * vLLM's `/sleep`); `waking`: the launcher wakes it for a parked request
 * (vLLM), making room first.
 */
export type EngineState =
  | "waiting"
  | "starting"
  | "ready"
  | "sleeping"
  | "waking"
  | "unhealthy"
  | "draining"
  | "stopping"
  | "backoff"
  | "failed"
  | "exited";

export const ENGINE_STATES: readonly EngineState[] = [
  "waiting",
  "starting",
  "ready",
  "sleeping",
  "waking",
  "unhealthy",
  "draining",
  "stopping",
  "backoff",
  "failed",
  "exited",
];
