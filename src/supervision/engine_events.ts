// What an engine run is told: anything async (the gate, a timer, a poll, an
// exit, a watcher's verdict, a memory reading) ends in one of these, and
// `EngineRun` handles each in its own method (docs/development.md's table).
import type { HealthCheck, ServerProcess } from "../engines/server_process.ts";
import type { GpuMemoryEvent } from "../gpu/gpu_lifecycle.ts";
import type { StartSlot, WaitingFor } from "../gpu/start_gate.ts";
import type { DrainEvent } from "./drain.ts";
import type { ServingEvent } from "./serving_watch.ts";

export type EngineEvent =
  | { kind: "held"; waiting: WaitingFor }
  /** `undefined`: not gated; `null`: the wait ended without a start. */
  | { kind: "admitted"; slot: StartSlot | undefined | null }
  | { kind: "probe"; run: ServerProcess; result: HealthCheck; counts: boolean }
  /** The `--start-timeout` timer fired. */
  | { kind: "silence"; run: ServerProcess }
  | { kind: "exited"; run: ServerProcess; status: Deno.CommandStatus }
  /** `retry`: `--failed-retry` ran out for a `failed` engine. */
  | { kind: "backoff-over" | "retry" }
  | { kind: "stop"; why: string }
  /** The gate measured the devices where run `pgid`'s load ended (its first 200). */
  | { kind: "load-end"; pgid: number; used: Readonly<Record<string, number>> }
  | GpuMemoryEvent
  | ServingEvent
  | DrainEvent;

export type EventOf<K extends EngineEvent["kind"]> = Extract<
  EngineEvent,
  { kind: K }
>;
