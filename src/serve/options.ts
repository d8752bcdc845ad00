/**
 * The options of {@linkcode Semioserve}, kept beside it so the launcher's
 * module stays about what it does.
 *
 * @module
 */
import type { RestartPolicy } from "../catalogue.ts";
import { type Environment, readEnvironment } from "../common/settings.ts";
import {
  DEFAULT_LOG_KEEP,
  DEFAULT_LOG_MAX_BYTES,
} from "../engines/log_sink.ts";

/** The refusal of a start without a model, from the command line or an embedder. */
export const NO_MODEL =
  "Cannot start: no model given (expected one or more catalogue names, e.g. llama-3)";

/**
 * Every default of `SemioserveOptions` that is a value (not read from the
 * environment), in the options' units: the one place they are written (the
 * log sizes are `EngineLog`'s own); a test holds the `@default` tags to them.
 */
export const SEMIOSERVE_DEFAULTS = {
  graceMs: 10_000,
  pollTimeoutMs: 2_000,
  restart: "on-failure",
  restartMaxDelayMs: 300_000,
  stableAfterMs: 600_000,
  healthIntervalMs: 10_000,
  livenessFailures: 6,
  logMaxBytes: DEFAULT_LOG_MAX_BYTES,
  logKeep: DEFAULT_LOG_KEEP,
  gpuReleaseTimeoutMs: 30_000,
  startTimeoutMs: 900_000,
  headerTimeoutMs: 10_000,
  idleTimeoutMs: 120_000,
  maxConnections: 1024,
  handleSignals: true,
} as const;

/** How a {@linkcode Semioserve} is configured; unset fields fall back to the environment. */
export interface SemioserveOptions {
  /** Model specs: `<name>` or `<VERB>:<name>`. Engine n listens on `port + n`. */
  models: readonly string[];
  /**
   * Host of the API and every engine.
   * @default {NUCLEUS_HOST}
   */
  host?: string;
  /**
   * Management port.
   * @default {NUCLEUS_PORT}
   */
  port?: number;
  /**
   * Development mode (no authentication).
   * @default {true while NUCLEUS_MODE starts with "dev"}
   */
  dev_mode?: boolean;
  /**
   * Root directory holding `models/`, `logs/`, `metrics/` and `data/`.
   * @default {MY_LOCAL}
   */
  directory?: string;
  /**
   * Catalogue file: a path or a URL.
   * @default {the catalogue shipped with the package}
   */
  catalogue?: string | URL;
  /**
   * Milliseconds engines get between SIGTERM and SIGKILL.
   * @default {10000}
   */
  graceMs?: number;
  /**
   * Milliseconds one engine health poll may take (in `GET /models` and in the
   * background).
   * @default {2000}
   */
  pollTimeoutMs?: number;
  /**
   * When an engine that ended is started again, for cards that set no
   * `restart` of their own.
   * @default {"on-failure"}
   */
  restart?: RestartPolicy;
  /**
   * Cap of the restart delay (1 s, doubling per restart), in milliseconds.
   * @default {300000}
   */
  restartMaxDelayMs?: number;
  /**
   * A run that stays up this long after its first 200 resets the restart
   * delay to 1 s, in milliseconds (tests shorten it).
   * @default {600000}
   */
  stableAfterMs?: number;
  /**
   * Milliseconds between background health polls of every engine.
   * @default {10000}
   */
  healthIntervalMs?: number;
  /**
   * Failed background polls in a row, after a first 200, that restart an
   * engine; 0 turns liveness restarts off.
   * @default {6}
   */
  livenessFailures?: number;
  /**
   * Rotate `logs/<name>.log` past this many bytes.
   * @default {104857600}
   */
  logMaxBytes?: number;
  /**
   * Rotated log files kept.
   * @default {5}
   */
  logKeep?: number;
  /**
   * The GPUs this launcher may hand out, as `--gpus` takes them (`0-7`,
   * `0,2,4-5`, `GPU-<uuid>` entries) or `none` for no placement.
   * @default {the launcher's CUDA_VISIBLE_DEVICES, else nvidia-smi's devices, else none}
   */
  gpus?: string;
  /**
   * Before a restart on GPUs, how long to wait for `nvidia-smi` to stop
   * listing the dead run's processes; then one warning and the start proceeds.
   * @default {30000}
   */
  gpuReleaseTimeoutMs?: number;
  /**
   * A run that has not answered its first 200 and has written no output for
   * this long is stopped (SIGTERM, grace, SIGKILL) and the restart policy
   * applies; 0 turns this off.
   * @default {900000}
   */
  startTimeoutMs?: number;
  /**
   * Milliseconds a client connection to the management API gets to send its
   * first complete request head (a TLS handshake included) before it is closed.
   * @default {10000}
   */
  headerTimeoutMs?: number;
  /**
   * Milliseconds a management API connection may stay idle before it is closed.
   * @default {120000}
   */
  idleTimeoutMs?: number;
  /**
   * Management API connections open at once; one more is accepted and closed
   * at once. Lowered to what the open-files limit leaves room for.
   * @default {1024}
   */
  maxConnections?: number;
  /** Aborting it shuts the launcher down, like SIGTERM. */
  signal?: AbortSignal;
  /**
   * Shut down on SIGTERM and SIGINT, and reload on SIGHUP, while running.
   * When false no signal handler is installed (SIGHUP then keeps its default
   * action): the program owns its signals and calls `reload()` itself.
   * @default {true}
   */
  handleSignals?: boolean;
  /** Called once the management API listens. */
  onListen?: (url: URL) => void;
}

SEMIOSERVE_DEFAULTS satisfies Partial<SemioserveOptions>;

/** The options {@linkcode SEMIOSERVE_DEFAULTS} fills in. */
type Defaulted = keyof typeof SEMIOSERVE_DEFAULTS;

/**
 * {@linkcode SemioserveOptions} with every default applied: the host and
 * port from the environment, the values from {@linkcode SEMIOSERVE_DEFAULTS}.
 * What stays optional has no single default (the directory, the mode, the
 * GPUs, the catalogue are resolved where they are checked).
 */
export type ResolvedOptions = Readonly<
  & Omit<SemioserveOptions, Defaulted | "host" | "port">
  & { [K in Defaulted]-?: NonNullable<SemioserveOptions[K]> }
  & { host: string; port: number }
>;

/** The options with every default applied, once, for the launcher's parts to read. */
export function resolveOptions(
  options: SemioserveOptions,
  env: Pick<Environment, "host" | "port"> = readEnvironment(),
): ResolvedOptions {
  const given = Object.fromEntries(
    Object.entries(options).filter(([, value]) => value !== undefined),
  );
  return {
    ...SEMIOSERVE_DEFAULTS,
    host: env.host,
    port: env.port,
    ...given,
  } as ResolvedOptions;
}
