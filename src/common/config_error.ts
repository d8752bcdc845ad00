/**
 * The input errors: {@linkcode InputError}, the one base class of every
 * error in what the operator gave, which the command line maps to one line
 * and exit code 1, and {@linkcode ConfigError}, a setting that cannot be
 * used. Their own module, so that the helpers `common.ts` uses at import can
 * throw them without an import cycle.
 *
 * @module
 */

/**
 * An input that cannot be used. `ConfigError`, `CatalogueError`, `KeyError`,
 * `EngineError`, `SSLConfigError` and `GpuPlacementError` extend it; each
 * keeps its own `name`.
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
   * @param message One line saying what was wrong and what was expected.
   * @param options The underlying error, if any.
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "InputError";
  }
}

/**
 * A setting that cannot be used: a bad environment variable, flag or file layout.
 *
 * @example
 * ```ts
 * import { ConfigError } from "@mymodel/serve/common";
 * const error = new ConfigError("Cannot use NUCLEUS_PORT=x: expected an integer");
 * console.assert(error.name === "ConfigError");
 * ```
 */
export class ConfigError extends InputError {
  /**
   * Creates the error.
   *
   * @param message One line saying what was wrong and what was expected.
   * @param options The underlying error, if any.
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "ConfigError";
  }
}
