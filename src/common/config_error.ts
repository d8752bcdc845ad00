/**
 * The error of a setting that cannot be used; its own module so that the
 * helpers `common.ts` uses at import can throw it without an import cycle.
 *
 * @module
 */
import { InputError } from "./input_error.ts";

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
