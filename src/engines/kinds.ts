/**
 * The engine kinds, by the name a card's `engine` field uses: one object a
 * kind (`kinds/vllm.ts`, `kinds/llama_cpp.ts`, `kinds/sglang.ts`,
 * `kinds/command.ts`). Adding a kind is one more object in this table, its
 * name in `catalogue/engine_names.ts` and `catalogue/catalogue.schema.json`
 * (tests check all three agree); {@linkcode registerEngineKind} adds one
 * for as long as it is needed (a test's toy kind).
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";
import { ENGINE_NAMES } from "../catalogue/engine_names.ts";
import type { EngineKind } from "./kinds/engine_kind.ts";
import { COMMAND } from "./kinds/command.ts";
import { LLAMA_CPP } from "./kinds/llama_cpp.ts";
import { SGLANG } from "./kinds/sglang.ts";
import { VLLM } from "./kinds/vllm.ts";

export type { EngineContext, EngineKind } from "./kinds/engine_kind.ts";

const KINDS: Record<string, EngineKind> = Object.fromEntries(
  [VLLM, LLAMA_CPP, SGLANG, COMMAND].map((kind) => [kind.name, kind]),
);

/** Every engine kind the catalogue accepts, by name. */
export const ENGINE_KINDS: Readonly<Record<string, EngineKind>> = KINDS;

/**
 * Adds a kind for as long as the returned handle is not disposed: the
 * catalogue then accepts its name in a card's `engine` field, and the plan
 * and a start use it like a built-in kind.
 *
 * @param kind The kind; its name must be new.
 * @returns A handle whose disposal removes the kind again.
 * @throws {TypeError} When a kind of that name exists.
 *
 * @example
 * ```ts ignore
 * using _toy = registerEngineKind(toyKind);
 * await new Semioserve({ models: ["toy-model"], directory }).plan();
 * ```
 */
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

/**
 * The executable a card's engine runs: the card's own, else its kind's, else
 * (`command`) the first word of the card's command.
 */
export function executableOf(card: ModelCard, kind: EngineKind): string {
  return card.executable ?? (kind.executable || card.command?.[0] || "");
}
