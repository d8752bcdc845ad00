/**
 * The input errors, in their own module so that what `common.ts` runs at
 * import can throw them without an import cycle.
 *
 * @module
 */

/**
 * An input that cannot be used: the command line prints its one line and
 * exits 1. `ConfigError`, `CatalogueError`, `KeyError`, `EngineError`,
 * `SSLConfigError` and `GpuPlacementError` extend it.
 *
 * @example
 * ```ts
 * import { ConfigError, InputError } from "@mymodel/serve/common";
 * console.assert(new ConfigError("Cannot use X=y: expected z") instanceof InputError);
 * ```
 */
export class InputError extends Error {
  /**
   * Creates the error.
   *
   * @param message One line: what was wrong and what was expected.
   * @param options The underlying error, if any.
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "InputError";
  }
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
  /**
   * Creates the error.
   *
   * @param message One line: what was wrong and what was expected.
   * @param options The underlying error, if any.
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "ConfigError";
  }
}
