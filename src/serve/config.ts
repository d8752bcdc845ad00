/**
 * The launcher's configuration, read once when it is made: the options (the
 * command line's or an embedder's) win over the variables they mirror; the
 * secrets come from their `*_FILE` files; the engines' base environment is the
 * launcher's, captured here, minus its private variables.
 *
 * @module
 */
import { ConfigError } from "../common/config_error.ts";
import { secretFromEnv } from "../common/secret_file.ts";
import {
  type EnvRecord,
  isDevMode,
  MAX_PORT,
  readEnvironment,
} from "../common/settings.ts";
import {
  NO_MODEL,
  type ResolvedOptions,
  SEMIOSERVE_DEFAULTS,
  type SemioserveOptions,
} from "./options.ts";
import { inheritedEnv } from "../engines/launch.ts";

/** A command line (or options) that cannot be used: exit code 2. */
export class UsageError extends Error {
  /** @param message One line naming the input and what was expected. */
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** Everything the launcher takes from its options and its environment, frozen. */
export interface Config extends ResolvedOptions {
  readonly devMode: boolean;
  /** `NUCLEUS_MODE` when it chose the mode (no `dev_mode` given). */
  readonly modeVariable: string | undefined;
  /** The launcher's `CUDA_VISIBLE_DEVICES`. */
  readonly visibleDevices: string | undefined;
  /** The launcher's environment as captured: `${NAME}` values, `nvidia-smi`. */
  readonly env: Readonly<Record<string, string>>;
  /** What every engine inherits: {@linkcode Config.env} less the private variables. */
  readonly engineEnv: Readonly<Record<string, string>>;
  readonly engineKey: string;
  readonly idpSecret: string;
  readonly idpIssuer: string;
}

/**
 * Reads the configuration: the models and the port range first (usage
 * errors), then `MY_LOCAL`, `NUCLEUS_PORT` and the secrets.
 *
 * @throws {UsageError} Without a model, or when a given port leaves no room
 *   for the engines.
 * @throws {ConfigError} On a bad variable or secret file.
 */
export function readConfig(
  options: SemioserveOptions,
  captured: EnvRecord = Deno.env.toObject(),
): Config {
  if (options.models.length === 0) throw new UsageError(NO_MODEL);
  const given = Object.fromEntries(
    Object.entries(options).filter(([, value]) => value !== undefined),
  ) as SemioserveOptions;
  const count = options.models.length;
  const overflow = (port: number) =>
    `Cannot use ${
      given.port === undefined ? "port" : "--port"
    } ${port} for ${count} models: engine ports would pass ${MAX_PORT}`;
  if (given.port !== undefined && given.port + count > MAX_PORT) {
    throw new UsageError(overflow(given.port));
  }
  const read = readEnvironment(captured, given);
  if (read.port + count > MAX_PORT) throw new ConfigError(overflow(read.port));
  const env = Object.fromEntries(
    Object.entries(captured).filter((e): e is [string, string] =>
      e[1] !== undefined
    ),
  );
  return Object.freeze({
    ...SEMIOSERVE_DEFAULTS,
    host: read.host,
    port: read.port,
    ...given,
    ...read.myLocal && given.directory === undefined
      ? { directory: read.myLocal }
      : {},
    devMode: given.dev_mode ?? isDevMode(read.mode),
    modeVariable: given.dev_mode === undefined ? read.mode : undefined,
    visibleDevices: env.CUDA_VISIBLE_DEVICES,
    env,
    engineEnv: inheritedEnv(env),
    engineKey: read.engineKey,
    idpSecret: read.idpSecret,
    idpIssuer: read.idpIssuer,
  });
}

/** The config with its secret files read again (a reload). */
export function withSecretsReread(config: Config): Config {
  const get = (name: string) => config.env[name];
  return Object.freeze({
    ...config,
    engineKey: secretFromEnv("LOCAL_ENGINE_API_KEY", get),
    idpSecret: secretFromEnv("IDP_SECRET", get),
  });
}
