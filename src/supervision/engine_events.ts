// What an engine run is told: anything async (the gate, a timer, a poll, an
// exit, a watcher's verdict, a memory reading) ends in one of these, and
// `EngineRun` handles each in its own method (docs/development.md's table).
import type { HealthCheck, ServerProcess } from "../engines/server_process.ts";
import type { GpuMemoryEvent } from "../gpu/gpu_lifecycle.ts";
import type { StartSlot, WaitingFor } from "../gpu/start_gate.ts";
import type { DrainEvent } from "./drain.ts";
import type { ServingEvent } from "./serving_watch.ts";

export type EngineEvent =
  | { readonly kind: "held"; readonly waiting: WaitingFor }
  /** `undefined`: not gated; `null`: the wait ended without a start. */
  | { readonly kind: "admitted"; readonly slot: StartSlot | undefined | null }
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
  /** `retry`: `--failed-retry` ran out for a `failed` engine. */
  | { readonly kind: "backoff-over" | "retry" }
  | { readonly kind: "stop"; readonly why: string }
  /** The gate measured the devices where run `pgid`'s load ended (its first 200). */
  | {
    readonly kind: "load-end";
    readonly pgid: number;
    readonly used: Readonly<Record<string, number>>;
  }
  | GpuMemoryEvent
  | ServingEvent
  | DrainEvent;

/** One event kind's shape. */
export type EventOf<K extends EngineEvent["kind"]> = Extract<
  EngineEvent,
  { kind: K }
>;
