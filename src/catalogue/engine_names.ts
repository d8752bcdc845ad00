/**
 * The names a card's `engine` field may take, in the order messages list
 * them: plain data, so the catalogue need not import `engines/kinds.ts`
 * (whose `registerEngineKind` adds a name here).
 */
export const ENGINE_NAMES: string[] = [
  "vllm",
  "llama.cpp",
  "sglang",
  "command",
];
