/**
 * The launcher's settings from a captured environment
 * ({@linkcode readEnvironment}; the table is in the door, `common.ts`), the
 * checks they share with the command line, and hosts as URLs write them.
 *
 * @module
 */
import { ConfigError } from "./config_error.ts";
import { secretFromEnv } from "./secret_file.ts";

/** The highest TCP port. */
export const MAX_PORT = 65535;

/**
 * Parses a TCP port, 1 to 65535.
 *
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
      }: expected an integer from 1 to ${MAX_PORT}`,
    );
  }
  const port = portIn(trimmed);
  if (port === undefined) {
    throw new ConfigError(
      `Cannot use ${what}=${trimmed}: expected a port from 1 to ${MAX_PORT}`,
    );
  }
  return port;
}

/** A TCP port from its digits, or undefined when not an integer from 1 to 65535. */
export function portIn(text: string): number | undefined {
  const trimmed = text.trim();
  const port = /^\d+$/.test(trimmed) ? Number(trimmed) : NaN;
  return port >= 1 && port <= MAX_PORT ? port : undefined;
}

/**
 * Checks that a path names an existing directory.
 *
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

/** The directories a root directory must hold. */
export const ROOT_SUBDIRECTORIES: readonly string[] = [
  "models",
  "logs",
  "metrics",
  "data",
];

const WILDCARDS: ReadonlySet<string> = new Set(["0.0.0.0", "::", "[::]", ""]);

/** True for a host that binds every interface: it names no address a client can reach. */
export function isWildcardHost(host: string): boolean {
  return WILDCARDS.has(host);
}

/** Formats a host for a URL: IPv6 literals get brackets. */
export function urlHost(host: string): string {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
}

/** True for a `NUCLEUS_MODE` that means development: one starting with `dev`. */
export function isDevMode(mode: string): boolean {
  return mode.startsWith("dev");
}

/** The launcher's settings as the environment gives them (see `common.ts`). */
export interface Environment {
  /** `MY_LOCAL`, checked; undefined when unset, empty or replaced by `--directory`. */
  readonly myLocal: string | undefined;
  readonly host: string;
  readonly port: number;
  readonly mode: string;
  /** The engine API key (`LOCAL_ENGINE_API_KEY` or its `_FILE`); empty for none. */
  readonly engineKey: string;
  /** The HS512 secret (`IDP_SECRET` or its `_FILE`); empty when unset. */
  readonly idpSecret: string;
  readonly idpIssuer: string;
}

/** What the command line (or an embedder) set: their variables are then not read, nor checked. */
export interface GivenSettings {
  readonly directory?: string | undefined;
  readonly port?: number | undefined;
}

/** An environment as captured: variable to value. */
export type EnvRecord = Readonly<Record<string, string | undefined>>;

/**
 * Reads the launcher's settings from a captured environment: `MY_LOCAL`,
 * `NUCLEUS_PORT`, then the two secrets are checked, in that order. A setting
 * in `given` wins: its variable is not read, so a stale one cannot refuse the
 * start.
 *
 * @throws {ConfigError} On a bad `MY_LOCAL` or `NUCLEUS_PORT`, or a secret
 *   given twice or in a file that cannot be read.
 */
export function readEnvironment(
  env: EnvRecord,
  given: GivenSettings = {},
): Environment {
  const get = (name: string) => env[name];
  const myLocal = given.directory === undefined
    ? get("MY_LOCAL") || undefined
    : undefined;
  const port = given.port === undefined ? get("NUCLEUS_PORT") : undefined;
  return {
    myLocal: myLocal && checkDirectory(myLocal, "MY_LOCAL"),
    host: get("NUCLEUS_HOST") || "localhost",
    port: given.port ?? (port ? parsePort(port, "NUCLEUS_PORT") : 5000),
    mode: get("NUCLEUS_MODE") || "dev",
    engineKey: secretFromEnv("LOCAL_ENGINE_API_KEY", get),
    idpSecret: secretFromEnv("IDP_SECRET", get),
    idpIssuer: get("IDP_ISSUER") ?? "",
  };
}
