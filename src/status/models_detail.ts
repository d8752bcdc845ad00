/**
 * `GET /models?detail=1` as the status view reads it: its own definition, not
 * the launcher's, so it knows only the wire format. Every field is optional
 * or nullable; unknown fields are kept (and shown by `--json`).
 *
 * @module
 */

/** How an engine's last run ended (`last_exit`); times are ISO. */
export interface WireLastExit {
  /** Null when a signal ended the run. */
  code?: number | null;
  /** The signal that ended the run. */
  signal?: string | null;
  /** When it ended. */
  at?: string;
  /** How long it ran, in seconds. */
  ran_seconds?: number;
  /** `"exit"` or `"unhealthy"` (stopped by the liveness check). */
  reason?: string;
  /** `bad-arguments`, `gpu-out-of-memory`, `signal`, `exit` … */
  cause?: string;
  /** The engine's own line that decided the cause. */
  message?: string | null;
  /** Fields this view does not know, kept. */
  [extra: string]: unknown;
}

/** What an engine waits for before it starts (`waiting_for`). */
export interface WireWaitingFor {
  /** E.g. `gpu-memory-free`. */
  reason?: string;
  /** The devices it waits for. */
  devices?: readonly string[] | null;
  /** Free text. */
  detail?: string | null;
  /** Fields this view does not know, kept. */
  [extra: string]: unknown;
}

/** A load phase's progress: shards read or bytes downloaded. */
export interface WireProgress {
  /** So far. */
  done?: number;
  /** In all, when known. */
  total?: number | null;
  /** `shards` or `bytes`. */
  unit?: string;
}

/** Traffic read from the engine's own metrics (`traffic`). */
export interface WireTraffic {
  /** Requests being computed. */
  running?: number;
  /** Requests queued. */
  waiting?: number;
  /** Generated tokens per second over the last health interval; null while unknown. */
  tokens_per_s?: number | null;
  /** When it was read. */
  at?: string;
  /** Fields this view does not know, kept. */
  [extra: string]: unknown;
}

/** One engine's entry; times are ISO. */
export interface WireEngine {
  /** What the model does. */
  verb?: string;
  /** The engine's OpenAI-compatible base URL. */
  url?: string;
  /** The engine's `/health` answered 200 during the request. */
  healthy?: boolean;
  /** `starting`, `ready`, `unhealthy`, `draining`, `stopping`, `backoff`, `exited`, `waiting`, ... */
  state?: string;
  /** Null while none runs. */
  pid?: number | null;
  /** Since the launcher started. */
  restarts?: number;
  /** The last state change. */
  since?: string;
  /** How the last run ended. */
  last_exit?: WireLastExit | null;
  /** The next start, in backoff. */
  next_restart?: string | null;
  /** `[]` for none, null when not placed. */
  gpus?: readonly string[] | null;
  /** What a `waiting` engine waits for. */
  waiting_for?: WireWaitingFor | null;
  /** While `starting`: `downloading`, `loading`, `preparing`. */
  phase?: string | null;
  /** When the phase began. */
  phase_since?: string | null;
  /** How far the phase has come. */
  progress?: WireProgress | null;
  /** Null while unknown or not read. */
  traffic?: WireTraffic | null;
  /** Fields this view does not know, kept. */
  [extra: string]: unknown;
}

/** The whole answer. */
export interface ModelsDetail {
  /** By catalogue name, in request order. */
  active: Record<string, WireEngine>;
  /** Every catalogue name. */
  catalogue?: string[];
  /** Fields this view does not know, kept. */
  [extra: string]: unknown;
}

/** Every answer has an `active` mapping. */
export function isModelsDetail(value: unknown): value is ModelsDetail {
  if (typeof value !== "object" || value === null) return false;
  const active = (value as { active?: unknown }).active;
  return typeof active === "object" && active !== null &&
    !Array.isArray(active);
}
