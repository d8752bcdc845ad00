/**
 * The model catalogue: a YAML file that maps catalogue names to model cards,
 * each saying what the model does (its verb), where its weights come from, which
 * inference engine serves it and with which extra flags.
 *
 * ```yaml
 * models:
 *   llama-3:
 *     verb: chat
 *     hub: meta-llama/Meta-Llama-3-8B-Instruct
 *     args: { max-model-len: 8192, enable-prefix-caching: true }
 * ```
 *
 * Every mistake in a catalogue is reported as a {@linkcode CatalogueError} whose
 * one-line message names the file, the card, the field and the line.
 *
 * @example Load the shipped catalogue and look a model up
 * ```ts
 * import { Registry } from "@mymodel/serve/catalogue";
 *
 * const registry = await Registry.load();
 * const card = registry.resolve("CHAT:llama-3");
 * console.log(card.hub, card.args.join(" "));
 * ```
 *
 * @module
 */
export { CatalogueError, KeyError } from "./catalogue/catalogue_error.ts";
export {
  type CardMetrics,
  Modality,
  type ModelCard,
  type RestartPolicy,
  Verb,
} from "./catalogue/model_card.ts";
export { type LoadOptions, Registry } from "./catalogue/registry.ts";
