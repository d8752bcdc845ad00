/**
 * What a reload changes for each requested engine: a pure function of its old
 * and new expanded cards. A field that reaches the engine (command line,
 * environment, executable, weights location, GPU need) means a restart; the
 * others (`restart:` policy, `description`, and what only the management API
 * reports: `verb`, `modality`) apply without one.
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";

/** What happens to one engine on a reload. */
export type CardChange = "restart" | "amend" | "same";

/** The engines of a reload, by what happens to them, each in request order. */
export interface ReloadDiff {
  /** Restarted with the new card. */
  restart: string[];
  /** Given the new card without a restart. */
  amend: string[];
  /** Not touched. */
  same: string[];
}

/**
 * Fields that never reach the engine process. Every other field does: a field
 * added to cards later counts as reaching the engine until it is listed here,
 * so a reload restarts rather than silently keeping an old setting.
 */
const NOT_ENGINE_FIELDS: ReadonlySet<string> = new Set([
  "name",
  "verb",
  "modality",
  "description",
  "restart",
]);

/** A value as canonical text: object keys sorted, arrays in order. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value).sort(([a], [b]) =>
      a < b ? -1 : a > b ? 1 : 0
    );
    return `{${
      entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(",")
    }}`;
  }
  return JSON.stringify(value) ?? "undefined";
}

/** The card's fields as canonical text, split by whether they reach the engine. */
function sides(card: ModelCard): { engine: string; other: string } {
  const engine: Record<string, unknown> = {};
  const other: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(card)) {
    if (value === undefined) continue;
    (NOT_ENGINE_FIELDS.has(key) ? other : engine)[key] = value;
  }
  return { engine: canonical(engine), other: canonical(other) };
}

/**
 * What a reload does to one engine, from its old and new expanded cards.
 *
 * @param before The card the engine runs with.
 * @param after The card the reload read (same name).
 * @returns `restart` when a field reaching the engine differs, else `amend`
 *   when any other field differs, else `same`.
 *
 * @example
 * ```ts ignore
 * cardChange(card, { ...card, description: "new words" }); // "amend"
 * cardChange(card, { ...card, args: ["--max-model-len", "8192"] }); // "restart"
 * ```
 */
export function cardChange(before: ModelCard, after: ModelCard): CardChange {
  const a = sides(before);
  const b = sides(after);
  if (a.engine !== b.engine) return "restart";
  return a.other === b.other ? "same" : "amend";
}

/**
 * Sorts the requested engines by what a reload does to them.
 *
 * @param before The running engines' cards, in request order.
 * @param after The reloaded cards for the same requests, in the same order.
 * @returns The names by change.
 * @throws {RangeError} When the two lists do not name the same engines in the
 *   same order (a caller's bug: a reload never changes what is requested).
 */
export function diffCards(
  before: readonly ModelCard[],
  after: readonly ModelCard[],
): ReloadDiff {
  const diff: ReloadDiff = { restart: [], amend: [], same: [] };
  if (
    before.length !== after.length ||
    before.some((card, i) => card.name !== after[i]!.name)
  ) {
    throw new RangeError(
      `Cannot compare the cards: [${
        before.map((c) => c.name).join(", ")
      }] and [${
        after.map((c) => c.name).join(", ")
      }] (expected the same engines)`,
    );
  }
  before.forEach((card, i) => {
    diff[cardChange(card, after[i]!)].push(card.name);
  });
  return diff;
}
