/**
 * The engine kinds a card's `engine` field may name, as plain data: the
 * catalogue validates against this list and the engine table
 * (`engines/kinds.ts`) holds one kind per name, so neither has to import the
 * other. The engine table's `registerEngineKind` adds a name here.
 *
 * @module
 */

/** The names a card's `engine` field may take, in the order messages list them. */
export const ENGINE_NAMES: string[] = [
  "vllm",
  "llama.cpp",
  "sglang",
  "command",
];
