// What a plan does to each engine, the one place it is decided: a pure
// function of what runs (its plan, whether it failed) and the new expanded
// card. A field that reaches the engine means a restart; a failed engine is
// retried whatever its card (the fix may be under models/).
import { isDeepStrictEqual } from "node:util";
import type { ModelCard } from "../catalogue.ts";

export type CardChange = "restart" | "amend" | "same";

/** What happens to one engine: `start` when none runs, `retry` a failed one. */
export type EngineChange = "start" | CardChange | "retry";

/** The engines of a plan, by what happens to them, each in request order. */
export type EngineChanges = Record<EngineChange, string[]>;

/** Any other field, one added later too, reaches the engine: a reload restarts rather than keep an old setting. */
const NOT_ENGINE_FIELDS: ReadonlySet<string> = new Set([
  ..."name verb modality description restart".split(" "),
  ..."failedRetry stallTimeout canary readAhead drainTimeout pin priority"
    .split(" "),
]);

/** `restart` when a field reaching the engine differs, else `amend` when another differs, else `same`. */
export function cardChange(before: ModelCard, after: ModelCard): CardChange {
  const a: Record<string, unknown> = { ...before };
  const b: Record<string, unknown> = { ...after };
  const changed = Object.keys({ ...a, ...b }).filter((key) =>
    !isDeepStrictEqual(a[key], b[key])
  );
  if (changed.some((key) => !NOT_ENGINE_FIELDS.has(key))) return "restart";
  return changed.length > 0 ? "amend" : "same";
}

/** `running`: each engine's card as it runs (none: a start). @throws {RangeError} Not the same engines in order. */
export function engineChanges(
  running: readonly { readonly card: ModelCard }[] | undefined,
  cards: readonly ModelCard[],
  failed: readonly string[] = [],
): EngineChanges {
  const changes: EngineChanges = {
    start: [],
    restart: [],
    amend: [],
    same: [],
    retry: [],
  };
  if (!running) {
    changes.start = cards.map((card) => card.name);
    return changes;
  }
  const names = (cards: readonly { card: ModelCard }[]) =>
    cards.map(({ card }) => card.name);
  const after = cards.map((card) => ({ card }));
  if (!isDeepStrictEqual(names(running), names(after))) {
    const [was, now] = [names(running).join(", "), names(after).join(", ")];
    throw new RangeError(
      `Cannot compare the cards: [${was}] and [${now}] (expected the same engines)`,
    );
  }
  running.forEach(({ card }, i) => {
    const change = cardChange(card, cards[i]!);
    const retried = change !== "restart" && failed.includes(card.name);
    changes[retried ? "retry" : change].push(card.name);
  });
  return changes;
}

/** The engines a plan resolves and places anew (a retry keeps its devices). */
export function renewed(changes: EngineChanges): ReadonlySet<string> {
  return new Set([...changes.start, ...changes.restart]);
}
