import { ConfigError } from "./config_error.ts";
import { secretFromEnv } from "./secret_file.ts";

export const MAX_PORT = 65535;

/** `what` names the flag or variable in the message. */
export function parsePort(text: string, what: string): number {
  const port = portIn(text);
  if (port !== undefined) return port;
  const trimmed = text.trim();
  const quoted = JSON.stringify(text);
  throw new ConfigError(
    /^\d+$/.test(trimmed)
      ? `Cannot use ${what}=${trimmed}: expected a port from 1 to ${MAX_PORT}`
      : `Cannot use ${what}=${quoted}: expected an integer from 1 to ${MAX_PORT}`,
  );
}

/** A TCP port from its digits, or undefined when not an integer from 1 to 65535. */
export function portIn(text: string): number | undefined {
  const trimmed = text.trim();
  const port = /^\d+$/.test(trimmed) ? Number(trimmed) : NaN;
  return port >= 1 && port <= MAX_PORT ? port : undefined;
}

/** `path`, checked to name an existing directory within this run's `--allow-read`. */
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

export const ROOT_SUBDIRECTORIES: readonly string[] = [
  "models",
  "logs",
  "metrics",
  "data",
];

/** A host that binds every interface names no address a client can reach. */
export function isWildcardHost(host: string): boolean {
  return ["0.0.0.0", "::", "[::]", ""].includes(host);
}

/** IPv6 literals get brackets. */
export function urlHost(host: string): string {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
}

export function isDevMode(mode: string): boolean {
  return mode.startsWith("dev");
}

export type EnvRecord = Readonly<Record<string, string | undefined>>;

// A setting in `given` (the command line's) wins: its variable is not read, so a stale one cannot refuse the start.
export function readEnvironment(
  env: EnvRecord,
  given: { directory?: string | undefined; port?: number | undefined } = {},
) {
  const get = (name: string) => env[name];
  const myLocal = given.directory === undefined
    ? get("MY_LOCAL") || undefined
    : undefined;
  const port = given.port === undefined ? get("NUCLEUS_PORT") : undefined;
  return {
    myLocal: myLocal && checkDirectory(myLocal, "MY_LOCAL"),
    host: get("NUCLEUS_HOST") || "localhost",
    port: given.port ?? (port ? parsePort(port, "NUCLEUS_PORT") : 5000),
    // Fails closed: set but empty is production, as any value not starting with dev.
    mode: get("NUCLEUS_MODE") ?? "dev",
    engineKey: secretFromEnv("LOCAL_ENGINE_API_KEY", get),
    idpSecret: secretFromEnv("IDP_SECRET", get),
    idpIssuer: get("IDP_ISSUER") ?? "",
  };
}
