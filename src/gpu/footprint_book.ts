// The footprint book, `<directory>/data/footprints.json`: the last footprint
// measured per card (its model and the flags that change its memory) and per
// device name, so that a plan knows before a start what a model takes there.
// Replaced whole (atomic_write.ts), the oldest entries dropped past a bound.
import type { ModelCard } from "../catalogue.ts";
import { writeFileAtomicSync } from "../common/atomic_write.ts";
import { log } from "../common/log.ts";
import type { Footprint } from "../engines/footprint.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";
import { flagValue } from "../engines/kinds/flag_values.ts";
import type { CardMemory } from "./placement.ts";

const FORMAT = "mymodel-serve footprints 1";
export const BOOK_ENTRIES = 256;

export interface BookEntry {
  readonly key: string;
  /** nvidia-smi's name of the device (`NVIDIA H200`), or the engine's (`CPU`). */
  readonly device: string;
  readonly footprint: Footprint;
}

/** Device name → the card's last footprint there. */
export type Measured = Readonly<Record<string, Footprint>>;

/** The card, its model and the values of its kind's memory flags and budget. */
export function footprintKey(card: ModelCard): string {
  const flags = ENGINE_KINDS[card.engine]?.memory?.flags ?? [];
  return JSON.stringify([
    card.name,
    card.hub ?? card.local,
    card.gpuMemory ?? null,
    ...flags.map((f) => flagValue(card.args, f.split(" "))?.value ?? null),
  ]);
}

/** What the book holds, read without a side effect; `unreadable` says why a file there is no book. */
export function readBook(
  directory: string,
): { entries: BookEntry[]; unreadable?: string } {
  let text;
  try {
    text = Deno.readTextFileSync(bookPath(directory));
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return { entries: [] };
    return { entries: [], unreadable: (error as Error).message };
  }
  try {
    const data = JSON.parse(text);
    if (data?.format !== FORMAT || !Array.isArray(data.entries)) {
      return { entries: [], unreadable: `not a "${FORMAT}" file` };
    }
    const entries = (data.entries as BookEntry[]).filter((e) =>
      typeof e?.key === "string" && typeof e.device === "string" &&
      typeof e.footprint?.measured_at === "string"
    );
    return { entries };
  } catch (error) {
    return { entries: [], unreadable: `not JSON (${(error as Error).name})` };
  }
}

/** A card's footprints, by device name. */
export function measuredOf(
  entries: readonly BookEntry[],
  card: ModelCard,
): Measured {
  const key = footprintKey(card);
  return Object.fromEntries(
    entries.filter((e) => e.key === key).map((e) => [e.device, e.footprint]),
  );
}

/**
 * What placement packs a card by: its `gpu_memory`, else (a kind whose
 * footprint is what it takes) its measured totals by device name.
 */
export function cardMemory(
  card: ModelCard,
  entries: readonly BookEntry[],
): CardMemory | undefined {
  if (card.gpuMemory !== undefined) {
    return { budgetMiB: card.gpuMemory / 2 ** 20 };
  }
  if (!ENGINE_KINDS[card.engine]?.memory?.packs) return undefined;
  const measured = Object.entries(measuredOf(entries, card)).flatMap((
    [device, f],
  ) => f.total_mib === null ? [] : [[device, f.total_mib] as const]);
  return measured.length > 0
    ? { measured: Object.fromEntries(measured) }
    : undefined;
}

export function bookPath(directory: string): string {
  return `${directory}/data/footprints.json`;
}

/** The launcher's book: read once, written at each footprint; a file that is no book is moved aside, never overwritten. */
export class FootprintBook {
  #path: string;
  #entries: BookEntry[];

  constructor(directory: string) {
    this.#path = bookPath(directory);
    const { entries, unreadable } = readBook(directory);
    this.#entries = entries;
    if (unreadable === undefined) return;
    const aside = `${this.#path}.unreadable-${
      new Date().toISOString().replace(/[-:.]/g, "")
    }`;
    try {
      Deno.renameSync(this.#path, aside);
      log.warn(
        `footprint book ${this.#path}: ${unreadable}: ignored, moved to ${aside}; footprints are measured anew`,
      );
    } catch (error) {
      log.warn(
        `footprint book ${this.#path}: ${unreadable}: ignored, and it cannot be moved aside (${
          (error as Error).message
        }): footprints are not remembered`,
      );
      this.#entries = [];
      this.#path = "";
    }
  }

  /** Remembers `footprint` as the card's latest on `device`. */
  note(card: ModelCard, device: string, footprint: Footprint): void {
    if (!this.#path) return;
    const key = footprintKey(card);
    this.#entries = [
      ...this.#entries.filter((e) => e.key !== key || e.device !== device),
      { key, device, footprint },
    ].slice(-BOOK_ENTRIES);
    try {
      writeFileAtomicSync(
        this.#path,
        JSON.stringify({ format: FORMAT, entries: this.#entries }) + "\n",
      );
    } catch (error) {
      log.warn(
        `cannot write the footprint book ${this.#path}: ${
          (error as Error).message
        }`,
      );
    }
  }
}
