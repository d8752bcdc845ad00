// The engine kinds by a card's `engine` name. Adding a kind is one more object
// here, its name in ENGINE_NAMES (src/catalogue/model_card.ts) and in
// catalogue/catalogue.schema.json (tests check all three agree).
import type { ModelCard } from "../catalogue.ts";
import { ENGINE_NAMES } from "../catalogue/model_card.ts";
import type { EngineKind } from "./kinds/engine_kind.ts";
import { COMMAND } from "./kinds/command.ts";
import { LLAMA_CPP } from "./kinds/llama_cpp.ts";
import { SGLANG } from "./kinds/sglang.ts";
import { VLLM } from "./kinds/vllm.ts";

export type { EngineKind } from "./kinds/engine_kind.ts";

const KINDS: Record<string, EngineKind> = Object.fromEntries(
  [VLLM, LLAMA_CPP, SGLANG, COMMAND].map((kind) => [kind.name, kind]),
);
export const ENGINE_KINDS: Readonly<Record<string, EngineKind>> = KINDS;

/** A kind for as long as the handle is not disposed (a test's toy kind). */
export function registerEngineKind(kind: EngineKind): Disposable {
  if (kind.name in KINDS) {
    throw new TypeError(`Cannot register engine kind ${kind.name}: it exists`);
  }
  KINDS[kind.name] = kind;
  ENGINE_NAMES.push(kind.name);
  return {
    [Symbol.dispose]() {
      delete KINDS[kind.name];
      ENGINE_NAMES.splice(ENGINE_NAMES.indexOf(kind.name), 1);
    },
  };
}

// The card's own, else its kind's, else (`command`) the first word of its command.
export function executableOf(card: ModelCard, kind: EngineKind): string {
  return card.executable ?? (kind.executable || card.command?.[0] || "");
}
