import { InputError } from "../common/config_error.ts";

/** An engine that cannot be prepared or started: a missing executable, missing weights, an ambiguous model file. */
export class EngineError extends InputError {
  override name: string = "EngineError";
}
