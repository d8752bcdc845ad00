import { InputError } from "../common/config_error.ts";

/**
 * An engine that cannot be prepared or started: a missing executable, missing
 * weights, an ambiguous model file.
 *
 * @example
 * ```ts
 * import { EngineError } from "@mymodel/serve/serve";
 * const error = new EngineError("Cannot start llama-3: vllm is not on PATH");
 * console.assert(error.name === "EngineError");
 * ```
 */
export class EngineError extends InputError {
  /** `message`: one line saying what was wrong and what was expected. */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "EngineError";
  }
}
