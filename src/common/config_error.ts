/**
 * An input that cannot be used: the command line prints its one line (what
 * was wrong and what was expected) and exits 1.
 *
 * @example
 * ```ts
 * import { ConfigError, InputError } from "@mymodel/serve/common";
 * console.assert(new ConfigError("Cannot use X=y: expected z") instanceof InputError);
 * ```
 */
export class InputError extends Error {
  /** The class's name. */
  override name: string = "InputError";
}

/**
 * A bad environment variable, flag or file layout.
 *
 * @example
 * ```ts
 * import { ConfigError } from "@mymodel/serve/common";
 * console.assert(new ConfigError("Cannot use X=y: expected z").name === "ConfigError");
 * ```
 */
export class ConfigError extends InputError {
  /** The class's name. */
  override name: string = "ConfigError";
}
