/**
 * What a reload does to each engine, a pure function of its old and new
 * expanded cards: a field that reaches the engine means a restart.
 *
 * @module
 */
import { isDeepStrictEqual } from "node:util";
import type { ModelCard } from "../catalogue.ts";

/** What happens to one engine on a reload. */
export type CardChange = "restart" | "amend" | "same";

/** The engines of a reload, by what happens to them, each in request order. */
export type ReloadDiff = Record<CardChange, string[]>;

/**
 * Fields that never reach the engine process. Any other field does, one added
 * later included, so a reload restarts rather than silently keeping an old
 * setting.
 */
const NOT_ENGINE_FIELDS: ReadonlySet<string> = new Set([
  "name",
  "verb",
  "modality",
  "description",
  "restart",
  "failedRetry",
  "stallTimeout",
  "canary",
  "drainTimeout",
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

/** @throws {RangeError} When the lists do not name the same engines in order. */
export function diffCards(
  before: readonly ModelCard[],
  after: readonly ModelCard[],
): ReloadDiff {
  const diff: ReloadDiff = { restart: [], amend: [], same: [] };
  const names = (cards: readonly ModelCard[]) => cards.map((c) => c.name);
  if (!isDeepStrictEqual(names(before), names(after))) {
    throw new RangeError(
      `Cannot compare the cards: [${names(before).join(", ")}] and [${
        names(after).join(", ")
      }] (expected the same engines)`,
    );
  }
  before.forEach((card, i) => {
    diff[cardChange(card, after[i]!)].push(card.name);
  });
  return diff;
}
