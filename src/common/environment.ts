/**
 * The launcher's settings read from the environment when this module is first
 * imported (the table is in the door, `common.ts`), and the two checks they
 * share with the command line: {@linkcode parsePort} and
 * {@linkcode checkDirectory}.
 *
 * @module
 */
import { ConfigError } from "./config_error.ts";
import { secretFromEnv } from "./secret_file.ts";

function env(name: string): string | undefined {
  return Deno.env.get(name);
}

/**
 * Parses a TCP port, 1 to 65535.
 *
 * @param text The text to parse.
 * @param what Names the input in the error, e.g. `--port` or `NUCLEUS_PORT`.
 * @returns The port number.
 * @throws {ConfigError} When the text is not an integer in range.
 *
 * @example
 * ```ts
 * import { parsePort } from "@mymodel/serve/common";
 * console.assert(parsePort("5000", "--port") === 5000);
 * ```
 */
export function parsePort(text: string, what: string): number {
  const trimmed = text.trim();
  if (!/^\d+$/.test(trimmed)) {
    throw new ConfigError(
      `Cannot use ${what}=${
        JSON.stringify(text)
      }: expected an integer from 1 to 65535`,
    );
  }
  const port = Number(trimmed);
  if (port < 1 || port > 65535) {
    throw new ConfigError(
      `Cannot use ${what}=${trimmed}: expected a port from 1 to 65535`,
    );
  }
  return port;
}

/**
 * Checks that a path names an existing directory.
 *
 * @param path The directory.
 * @param what Names the input in the error, e.g. `MY_LOCAL` or `--directory`.
 * @returns The path, unchanged.
 * @throws {ConfigError} When it does not exist, is not a directory, or is
 *   outside this run's `--allow-read`.
 *
 * @example
 * ```ts
 * import { checkDirectory } from "@mymodel/serve/common";
 * checkDirectory(Deno.cwd(), "--directory");
 * ```
 */
export function checkDirectory(path: string, what: string): string {
  let info: Deno.FileInfo;
  try {
    info = Deno.statSync(path);
  } catch (cause) {
    // Deno refuses a path outside --allow-read before asking the kernel.
    const detail = cause instanceof Deno.errors.NotCapable
      ? `not readable under this run's permissions (expected a directory inside --allow-read; under deno task start, set MY_LOCAL=${path})`
      : "no such directory (expected an existing directory)";
    throw new ConfigError(`Cannot use ${what}=${path}: ${detail}`, { cause });
  }
  if (!info.isDirectory) {
    throw new ConfigError(
      `Cannot use ${what}=${path}: not a directory (expected an existing directory)`,
    );
  }
  return path;
}

/** Root directory from `MY_LOCAL`, checked to exist at import; `undefined` when unset. */
export const MY_LOCAL: string | undefined = env("MY_LOCAL")
  ? checkDirectory(env("MY_LOCAL") as string, "MY_LOCAL")
  : undefined;

/** Host from `NUCLEUS_HOST`, else `localhost`. */
export const NUCLEUS_HOST: string = env("NUCLEUS_HOST") || "localhost";

/** Management port from `NUCLEUS_PORT` (checked at import), else `5000`. */
export const NUCLEUS_PORT: number = env("NUCLEUS_PORT")
  ? parsePort(env("NUCLEUS_PORT") as string, "NUCLEUS_PORT")
  : 5000;

/** Mode from `NUCLEUS_MODE`, else `dev`; a value starting with `dev` means development. */
export const NUCLEUS_MODE: string = env("NUCLEUS_MODE") || "dev";

/** True when {@linkcode NUCLEUS_MODE} starts with `dev`. */
export const DEV_MODE_DEFAULT: boolean = NUCLEUS_MODE.startsWith("dev");

/**
 * API key every engine demands, from `LOCAL_ENGINE_API_KEY` or the file
 * `LOCAL_ENGINE_API_KEY_FILE` names; empty for none.
 */
export const LOCAL_ENGINE_API_KEY: string = secretFromEnv(
  "LOCAL_ENGINE_API_KEY",
);

/**
 * HS512 secret (raw text) for production mode, from `IDP_SECRET` or the file
 * `IDP_SECRET_FILE` names; empty when unset.
 */
export const IDP_SECRET: string = secretFromEnv("IDP_SECRET");

/** Issuer every production token must carry, from `IDP_ISSUER`; empty when unset. */
export const IDP_ISSUER: string = env("IDP_ISSUER") ?? "";

/** The directories a root directory must hold. */
export const ROOT_SUBDIRECTORIES: readonly string[] = [
  "models",
  "logs",
  "metrics",
  "data",
];
