/**
 * The one base class of every input error: what the operator gave (a flag,
 * a variable, a file, the catalogue) cannot be used. The command line maps
 * each to one line and exit code 1.
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
