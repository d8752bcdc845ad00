// The launcher's options, their defaults, and the configuration read from
// them and the environment once, when the launcher is made: an option wins
// over the variable it mirrors. A test holds the `@default` tags to
// {@linkcode SEMIOSERVE_DEFAULTS}.
import type { RestartPolicy } from "../catalogue.ts";
import { ConfigError } from "../common/config_error.ts";
import { MAX_TIMER_MS } from "../common/seconds.ts";
import { secretFromEnv } from "../common/secret_file.ts";
import {
  type EnvRecord,
  isDevMode,
  MAX_PORT,
  readEnvironment,
} from "../common/settings.ts";
import type { EngineDefaults } from "../engines/engine_plan.ts";
import { inheritedEnv } from "../engines/launch.ts";
import {
  DEFAULT_LOG_KEEP,
  DEFAULT_LOG_MAX_BYTES,
} from "../engines/log_sink.ts";

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
} as const satisfies Partial<SemioserveOptions>;

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
  /** The GPUs to hand out, as `--gpus` takes them (`0-7`, `0,2,4-5`, `GPU-<uuid>`) or `none`. @default {the launcher's CUDA_VISIBLE_DEVICES, else nvidia-smi's devices, else none} */
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
  /** Shut down on SIGTERM and SIGINT, reload on SIGHUP; false: the embedding program owns its signals. @default {true} */
  handleSignals?: boolean;
  /** Called once the management API listens. */
  onListen?: (url: URL) => void;
}

type Defaulted = keyof typeof SEMIOSERVE_DEFAULTS;

/** A command line (or options) that cannot be used: exit code 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** Everything the launcher takes from its options and its environment, frozen. */
export type Config = Readonly<
  & Omit<SemioserveOptions, Defaulted | "host" | "port">
  & { [K in Defaulted]-?: NonNullable<SemioserveOptions[K]> }
  & {
    host: string;
    port: number;
    devMode: boolean;
    /** Where `host` comes from: `--host`, `NUCLEUS_HOST`, or undefined for the default. */
    hostFrom: "--host" | "NUCLEUS_HOST" | undefined;
    /** `NUCLEUS_MODE` when it chose the mode (no `dev_mode` given). */
    modeVariable: string | undefined;
    /** The launcher's environment as captured: `${NAME}` values, `nvidia-smi`. */
    env: Readonly<Record<string, string>>;
    /** What every engine inherits: `env` less the private variables. */
    engineEnv: Readonly<Record<string, string>>;
    engineKey: string;
    idpSecret: string;
    idpIssuer: string;
  }
>;

/** The launcher's per-engine settings, which each plan resolves under its card's. */
export function engineDefaults(config: Config): EngineDefaults {
  const { restart, failedRetryMs, drainTimeoutMs } = config;
  const { stallTimeoutMs, canaryIntervalMs } = config;
  const timings = { failedRetryMs, drainTimeoutMs, stallTimeoutMs };
  return { restart, ...timings, canaryIntervalMs };
}

/** @throws {UsageError | ConfigError} No model, no room for the engines' ports, a bad variable or secret file. */
export function readConfig(
  options: SemioserveOptions,
  captured: EnvRecord = Deno.env.toObject(),
): Config {
  if (options.models.length === 0) {
    throw new UsageError(
      "Cannot start: no model given (expected one or more catalogue names, e.g. llama-3)",
    );
  }
  const given = Object.fromEntries(
    Object.entries(options).filter(([, value]) => value !== undefined),
  ) as SemioserveOptions;
  // The command line checked its seconds; an embedder's milliseconds end in the same timers.
  for (const [option, value] of Object.entries(given)) {
    if (
      option.endsWith("Ms") &&
      !((value as number) >= 0 && (value as number) <= MAX_TIMER_MS)
    ) {
      throw new UsageError(
        `Cannot use ${option}=${value}: expected milliseconds from 0 to ${MAX_TIMER_MS} (a timer holds at most 2^31-1 ms, about 24.8 days)`,
      );
    }
  }
  const count = options.models.length;
  const flag = given.port === undefined ? "port" : "--port";
  const overflow = (port: number) =>
    `Cannot use ${flag} ${port} for ${count} models: engine ports would pass ${MAX_PORT}`;
  if (given.port !== undefined && given.port + count > MAX_PORT) {
    throw new UsageError(overflow(given.port));
  }
  const read = readEnvironment(captured, given);
  if (read.port + count > MAX_PORT) throw new ConfigError(overflow(read.port));
  const set = (e: [string, unknown]): e is [string, string] =>
    e[1] !== undefined;
  const env = Object.fromEntries(Object.entries(captured).filter(set));
  return Object.freeze({
    ...SEMIOSERVE_DEFAULTS,
    host: read.host,
    port: read.port,
    ...given,
    ...read.myLocal && given.directory === undefined
      ? { directory: read.myLocal }
      : {},
    hostFrom: given.host !== undefined
      ? "--host"
      : captured.NUCLEUS_HOST
      ? "NUCLEUS_HOST"
      : undefined,
    devMode: given.dev_mode ?? isDevMode(read.mode),
    modeVariable: given.dev_mode === undefined ? read.mode : undefined,
    env,
    engineEnv: inheritedEnv(env),
    engineKey: checkedEngineKey(read.engineKey, env),
    idpSecret: read.idpSecret,
    idpIssuer: read.idpIssuer,
  });
}

/** The config with its secret files read again (a reload). */
export function withSecretsReread(config: Config): Config {
  const get = (name: string) => config.env[name];
  const key = secretFromEnv("LOCAL_ENGINE_API_KEY", get);
  const engineKey = checkedEngineKey(key, config.env);
  return Object.freeze({
    ...config,
    engineKey,
    idpSecret: secretFromEnv("IDP_SECRET", get),
  });
}

/** The variable the engine key came from, as a message names it (never the key). */
export function engineKeySource(env: EnvRecord): string {
  const file = env.LOCAL_ENGINE_API_KEY_FILE;
  return file ? `LOCAL_ENGINE_API_KEY_FILE=${file}` : "LOCAL_ENGINE_API_KEY";
}

const KEY_CHARACTERS: Record<string, string> = {
  "\r": "a carriage return",
  "\n": "a line feed",
  "\t": "a tab",
};

// The launcher sends the key in a header: fetch drops surrounding whitespace and
// a trailing CR, refuses what is beyond Latin-1, and sends Latin-1 as one byte
// where the engine's argv holds UTF-8.
function checkedEngineKey(key: string, env: EnvRecord): string {
  const bad = /[^\x20-\x7e]/.exec(key)?.[0];
  const problem = bad !== undefined
    ? `holds ${KEY_CHARACTERS[bad] ?? "a character outside printable ASCII"}`
    : key.trim() !== key
    ? "starts or ends with a space"
    : undefined;
  if (problem === undefined) return key;
  const source = engineKeySource(env);
  throw new ConfigError(
    `Cannot use ${source}: the key ${problem} (expected printable ASCII without surrounding spaces: the launcher sends it to each engine in an Authorization header)`,
  );
}
