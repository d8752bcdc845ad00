/**
 * The engine kinds a card's `engine` field may name, as plain data: the
 * catalogue validates against this list and the engine table is keyed by it,
 * so neither has to import the other.
 *
 * @module
 */

/** The names a card's `engine` field may take, in the order messages list them. */
export const ENGINE_NAMES = ["vllm", "llama.cpp", "sglang", "command"] as const;

/** One of the {@linkcode ENGINE_NAMES}. */
export type EngineName = typeof ENGINE_NAMES[number];
