/**
 * The options of {@linkcode Semioserve}, kept beside it so the launcher's
 * module stays about what it does.
 *
 * @module
 */
import type { RestartPolicy } from "../catalogue.ts";
import { NUCLEUS_HOST, NUCLEUS_PORT } from "../common.ts";
import { SEMIOSERVE_DEFAULTS } from "./defaults.ts";

export { SEMIOSERVE_DEFAULTS };

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

// Checked here, where the options are declared; written in defaults.ts, which
// imports nothing that reads the environment (the bench's bare server uses it).
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

/**
 * The options with every default applied, once, for the launcher's parts to
 * read.
 *
 * @param options As given.
 * @returns Every defaulted field set.
 */
export function resolveOptions(options: SemioserveOptions): ResolvedOptions {
  const given = Object.fromEntries(
    Object.entries(options).filter(([, value]) => value !== undefined),
  );
  return {
    ...SEMIOSERVE_DEFAULTS,
    host: NUCLEUS_HOST,
    port: NUCLEUS_PORT,
    ...given,
  } as ResolvedOptions;
}
