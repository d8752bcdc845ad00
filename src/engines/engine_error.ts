import { InputError } from "../common/config_error.ts";

/** An engine that cannot be prepared or started: a missing executable, missing weights, an ambiguous model file. */
export class EngineError extends InputError {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "EngineError";
  }
}
