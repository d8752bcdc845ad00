/**
 * The events of an engine run (`engine_run.ts`): a new one is a member here
 * and a case of its `#on`.
 *
 * @module
 */
import type { StartSlot, WaitingFor } from "../gpu/start_gate.ts";
import type { HealthCheck, ServerProcess } from "../engines/server_process.ts";
import type { DrainEvent } from "./drain.ts";
import type { ServingEvent } from "./serving_watch.ts";

/**
 * What an engine run is told. Only `#on` acts on events; anything async
 * (the gate, a timer, a poll, an exit) ends in one.
 */
export type EngineEvent =
  /** The gate holds the start (each look while held). */
  | { readonly kind: "held"; readonly waiting: WaitingFor }
  /** The gate let it start (`undefined`: not gated; `null`: the wait ended without a start). */
  | { readonly kind: "admitted"; readonly slot: StartSlot | undefined | null }
  /** A health poll's answer; `counts`: a background poll (liveness). */
  | {
    readonly kind: "probe";
    readonly run: ServerProcess;
    readonly result: HealthCheck;
    readonly counts: boolean;
  }
  /** The `--start-timeout` timer fired. */
  | { readonly kind: "silence"; readonly run: ServerProcess }
  | {
    readonly kind: "exited";
    readonly run: ServerProcess;
    readonly status: Deno.CommandStatus;
  }
  /** `retry`: `--failed-retry` (or a card's `failed_retry`) ran out for a `failed` engine. */
  | { readonly kind: "backoff-over" | "retry" }
  | { readonly kind: "stop"; readonly why: string }
  | ServingEvent
  | DrainEvent;
