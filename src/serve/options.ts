/**
 * The options of {@linkcode Semioserve} and their defaults, in one place (a
 * test holds the `@default` tags to {@linkcode SEMIOSERVE_DEFAULTS}).
 *
 * @module
 */
import type { RestartPolicy } from "../catalogue.ts";
import {
  DEFAULT_LOG_KEEP,
  DEFAULT_LOG_MAX_BYTES,
} from "../engines/log_sink.ts";

/** The refusal of a start without a model, from the command line or an embedder. */
export const NO_MODEL =
  "Cannot start: no model given (expected one or more catalogue names, e.g. llama-3)";

/** Every default of `SemioserveOptions` that is a value, in the options' units. */
export const SEMIOSERVE_DEFAULTS = {
  graceMs: 10_000,
  drainTimeoutMs: 30_000,
  pollTimeoutMs: 2_000,
  restart: "on-failure",
  restartMaxDelayMs: 300_000,
  failedRetryMs: 600_000,
  stableAfterMs: 600_000,
  healthIntervalMs: 10_000,
  livenessFailures: 6,
  logMaxBytes: DEFAULT_LOG_MAX_BYTES,
  logKeep: DEFAULT_LOG_KEEP,
  gpuReleaseTimeoutMs: 30_000,
  startTimeoutMs: 900_000,
  stallTimeoutMs: 300_000,
  canaryIntervalMs: 300_000,
  canaryTimeoutMs: 30_000,
  headerTimeoutMs: 10_000,
  idleTimeoutMs: 120_000,
  maxConnections: 1024,
  handleSignals: true,
} as const;

/** How a {@linkcode Semioserve} is configured; unset fields fall back to the environment. */
export interface SemioserveOptions {
  /** Model specs: `<name>` or `<VERB>:<name>`. Engine n listens on `port + n`. */
  models: readonly string[];
  /** Host of the API and every engine. @default {NUCLEUS_HOST} */
  host?: string;
  /** Management port. @default {NUCLEUS_PORT} */
  port?: number;
  /** Development mode (no authentication). @default {true while NUCLEUS_MODE starts with "dev"} */
  dev_mode?: boolean;
  /** Root directory holding `models/`, `logs/`, `metrics/` and `data/`. @default {MY_LOCAL} */
  directory?: string;
  /** Catalogue file: a path or a URL. @default {the catalogue shipped with the package} */
  catalogue?: string | URL;
  /** Milliseconds engines get between SIGTERM and SIGKILL. @default {10000} */
  graceMs?: number;
  /** Before a planned stop (a reload's restart, the launcher's stop), at most this many ms waiting for a ready engine's requests in flight; 0: no drain. A card's `drain_timeout` wins. @default {30000} */
  drainTimeoutMs?: number;
  /** Milliseconds one engine health poll may take. @default {2000} */
  pollTimeoutMs?: number;
  /** When an ended engine starts again, for cards without `restart`. @default {"on-failure"} */
  restart?: RestartPolicy;
  /** Cap of the restart delay (1 s, doubling), in milliseconds. @default {300000} */
  restartMaxDelayMs?: number;
  /** A `failed` engine is tried again after this long (ms); 0: never. @default {600000} */
  failedRetryMs?: number;
  /** Up this long after its first 200, a run resets the restart delay (ms). @default {600000} */
  stableAfterMs?: number;
  /** Milliseconds between background health polls. @default {10000} */
  healthIntervalMs?: number;
  /** Failed polls in a row, after a first 200, that restart an engine; 0: off. @default {6} */
  livenessFailures?: number;
  /** Rotate `logs/<name>.log` past this many bytes. @default {104857600} */
  logMaxBytes?: number;
  /** Rotated log files kept. @default {5} */
  logKeep?: number;
  /**
   * The GPUs to hand out, as `--gpus` takes them (`0-7`, `0,2,4-5`,
   * `GPU-<uuid>`) or `none`.
   * @default {the launcher's CUDA_VISIBLE_DEVICES, else nvidia-smi's devices, else none}
   */
  gpus?: string;
  /** Before a restart on GPUs, how long to wait for the dead run's memory (ms). @default {30000} */
  gpuReleaseTimeoutMs?: number;
  /** A run silent this long before its first 200 is stopped (ms); 0: off. @default {900000} */
  startTimeoutMs?: number;
  /** A ready engine with requests running and no token counted this long is stopped as stalled (ms); 0: off. @default {300000} */
  stallTimeoutMs?: number;
  /** A ready engine idle this long (nothing running, no counter moving) gets a canary request (ms); 0: off. @default {300000} */
  canaryIntervalMs?: number;
  /** How long a canary request may take (ms); two failures in a row: stalled. @default {30000} */
  canaryTimeoutMs?: number;
  /** Milliseconds an API connection gets to send its request head. @default {10000} */
  headerTimeoutMs?: number;
  /** Milliseconds an API connection may stay idle. @default {120000} */
  idleTimeoutMs?: number;
  /** API connections open at once (lowered to the open-files limit). @default {1024} */
  maxConnections?: number;
  /** Aborting it shuts the launcher down, like SIGTERM. */
  signal?: AbortSignal;
  /**
   * Shut down on SIGTERM and SIGINT, reload on SIGHUP; false: the embedding
   * program owns its signals and calls `reload()` itself.
   * @default {true}
   */
  handleSignals?: boolean;
  /** Called once the management API listens. */
  onListen?: (url: URL) => void;
}

SEMIOSERVE_DEFAULTS satisfies Partial<SemioserveOptions>;

type Defaulted = keyof typeof SEMIOSERVE_DEFAULTS;

/** {@linkcode SemioserveOptions} with every default applied (see `config.ts`). */
export type ResolvedOptions = Readonly<
  & Omit<SemioserveOptions, Defaulted | "host" | "port">
  & { [K in Defaulted]-?: NonNullable<SemioserveOptions[K]> }
  & { host: string; port: number }
>;
