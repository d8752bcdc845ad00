/**
 * The shape of `GET /models?detail=1` as the status view reads it. Defined
 * here, not imported from the launcher's supervision code, so the status view
 * knows only the wire format: every field is optional or nullable, and fields
 * it does not know are kept (and shown by `--json`) but never required.
 *
 * @module
 */

/** How an engine's last run ended (`last_exit`). */
export interface WireLastExit {
  /** Exit code, or null when a signal ended the run. */
  code?: number | null;
  /** The signal that ended the run, or null. */
  signal?: string | null;
  /** ISO time of the end. */
  at?: string;
  /** How long the run lasted, in seconds. */
  ran_seconds?: number;
  /** `"exit"` or `"unhealthy"` (stopped by the liveness check). */
  reason?: string;
  /** Why it ended (`bad-arguments`, `gpu-out-of-memory`, `signal`, `exit` …). */
  cause?: string;
  /** The engine's own line that decided the cause, or null. */
  message?: string | null;
  /** Fields this view does not know, kept as received. */
  [extra: string]: unknown;
}

/** What an engine waits for before it starts (`waiting_for`), when the launcher says. */
export interface WireWaitingFor {
  /** Why it waits, e.g. `gpu-memory-free`. */
  reason?: string;
  /** The devices it waits for, when the launcher names them. */
  devices?: readonly string[] | null;
  /** Free text from the launcher. */
  detail?: string | null;
  /** Fields this view does not know, kept as received. */
  [extra: string]: unknown;
}

/** One `active` entry. */
/** A load phase's progress as the launcher reports it. */
export interface WireProgress {
  /** Shards read or bytes downloaded so far. */
  done?: number;
  /** How many in all, or null when not known. */
  total?: number | null;
  /** `shards` or `bytes`. */
  unit?: string;
}

/** One engine's entry in `GET /models?detail=1`. */
export interface WireEngine {
  /** What the model does (`chat`, `embed`, ...). */
  verb?: string;
  /** The engine's OpenAI-compatible base URL. */
  url?: string;
  /** True when the engine's `/health` answered 200 during the request. */
  healthy?: boolean;
  /** The lifecycle state: `starting`, `ready`, `unhealthy`, `stopping`, `backoff`, `exited`, `waiting`, ... */
  state?: string;
  /** The engine process's pid, or null while none runs. */
  pid?: number | null;
  /** Restarts since the launcher started. */
  restarts?: number;
  /** ISO time of the last state change. */
  since?: string;
  /** How the last run ended, or null. */
  last_exit?: WireLastExit | null;
  /** ISO time of the next start while in backoff, else null. */
  next_restart?: string | null;
  /** Devices handed to the engine, `[]` for none, null when not placed. */
  gpus?: readonly string[] | null;
  /** What a `waiting` engine waits for, else null. */
  waiting_for?: WireWaitingFor | null;
  /** While `starting`: `downloading`, `loading`, `preparing`, or null. */
  phase?: string | null;
  /** ISO time the phase began, or null. */
  phase_since?: string | null;
  /** How far the phase has come, or null. */
  progress?: WireProgress | null;
  /** Fields this view does not know, kept as received. */
  [extra: string]: unknown;
}

/** The whole answer. */
export interface ModelsDetail {
  /** The configured engines by catalogue name, in request order. */
  active: Record<string, WireEngine>;
  /** Every catalogue name. */
  catalogue?: string[];
  /** Fields this view does not know, kept as received. */
  [extra: string]: unknown;
}

/** True when `value` has the one thing every answer has: an `active` mapping. */
export function isModelsDetail(value: unknown): value is ModelsDetail {
  if (typeof value !== "object" || value === null) return false;
  const active = (value as { active?: unknown }).active;
  return typeof active === "object" && active !== null &&
    !Array.isArray(active);
}
