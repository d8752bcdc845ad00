// The footprint book, `<directory>/data/footprints.json`: each card's last
// footprint (per its model and the flags that change its memory) per device
// name, so that a plan knows what a model takes before it starts. Replaced
// whole (atomic_write.ts); the oldest entries dropped past BOOK_ENTRIES.
import type { ModelCard } from "../catalogue.ts";
import { writeFileAtomicSync } from "../common/atomic_write.ts";
import { log } from "../common/log.ts";
import type { Footprint } from "../engines/footprint.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";
import { flagValue } from "../engines/kinds/flag_values.ts";
import type { CardMemory } from "./layout.ts";

const FORMAT = "mymodel-serve footprints 1";
export const BOOK_ENTRIES = 256;

/** `device`: nvidia-smi's name (`NVIDIA H200`), or the engine's (`CPU`). */
export interface BookEntry {
  readonly key: string;
  readonly device: string;
  readonly footprint: Footprint;
}

/** The card, its model, its budget and the values of its kind's memory flags. */
export function footprintKey(card: ModelCard): string {
  const flags = ENGINE_KINDS[card.engine]?.sizing?.flags ?? [];
  return JSON.stringify([
    card.name,
    card.hub ?? card.local,
    card.gpuMemory ?? null,
    ...flags.map((f) => flagValue(card.args, f.split(" "))?.value ?? null),
  ]);
}

export function bookPath(directory: string): string {
  return `${directory}/data/footprints.json`;
}

/** What a read of the book found. */
export type ReadBook = {
  readonly entries: readonly BookEntry[];
  readonly unreadable?: string;
};

/** The book's entries, read with no side effect; `unreadable`: why the file there is no book. */
export function readBook(
  directory: string,
): ReadBook {
  try {
    const data = JSON.parse(Deno.readTextFileSync(bookPath(directory)));
    if (data?.format !== FORMAT || !Array.isArray(data.entries)) {
      return { entries: [], unreadable: `not a "${FORMAT}" file` };
    }
    const entries = (data.entries as BookEntry[]).filter((e) =>
      typeof e?.key === "string" && typeof e.device === "string" &&
      typeof e.footprint?.measured_at === "string"
    );
    return { entries };
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return { entries: [] };
    const why = error instanceof SyntaxError ? "not JSON" : "unreadable";
    return { entries: [], unreadable: `${why} (${(error as Error).message})` };
  }
}

/** A card's footprints, by device name. */
export function measuredOf(
  entries: readonly BookEntry[],
  card: ModelCard,
): Record<string, Footprint> {
  const key = footprintKey(card);
  return Object.fromEntries(
    entries.filter((e) => e.key === key).map((e) => [e.device, e.footprint]),
  );
}

/** What placement packs a card by: its `gpu_memory`, else (a kind that packs) its measured totals. */
export function cardMemory(
  card: ModelCard,
  entries: readonly BookEntry[],
): CardMemory | undefined {
  if (card.gpuMemory !== undefined) {
    return { budgetMiB: card.gpuMemory / 2 ** 20 };
  }
  if (!ENGINE_KINDS[card.engine]?.sizing?.packs) return undefined;
  const measured = Object.entries(measuredOf(entries, card))
    .filter(([, f]) => f.total_mib !== null)
    .map(([device, f]) => [device, f.total_mib!]);
  return measured.length
    ? { measured: Object.fromEntries(measured) }
    : undefined;
}

/** The launcher's book: a file there that is no book is moved aside (one warning), never overwritten. */
export class FootprintBook {
  #path: string | undefined;
  #entries: BookEntry[];

  /** `read`: the book as the plan's facts read it (else read here). */
  constructor(directory: string, read = readBook(directory)) {
    const path = bookPath(directory);
    const { entries, unreadable } = read;
    this.#entries = [...entries];
    this.#path = path;
    if (unreadable === undefined) return;
    const aside = `${path}.unreadable-${
      new Date().toISOString().replace(/[-:.]/g, "")
    }`;
    let outcome = `moved to ${aside}; footprints are measured anew`;
    try {
      Deno.renameSync(path, aside);
    } catch (error) {
      this.#path = undefined;
      outcome = `cannot be moved aside (${
        (error as Error).message
      }): footprints are not remembered`;
    }
    log.warn(`footprint book ${path}: ${unreadable}: ignored, ${outcome}`);
  }

  /** Keeps `footprint` as the card's latest on `device`. */
  note(card: ModelCard, device: string, footprint: Footprint): void {
    if (this.#path === undefined) return;
    const key = footprintKey(card);
    this.#entries = [
      ...this.#entries.filter((e) => e.key !== key || e.device !== device),
      { key, device, footprint },
    ].slice(-BOOK_ENTRIES);
    const text = JSON.stringify({ format: FORMAT, entries: this.#entries });
    try {
      writeFileAtomicSync(this.#path, text + "\n");
    } catch (error) {
      log.warn(
        `cannot write the footprint book ${this.#path}: ${
          (error as Error).message
        }`,
      );
    }
  }
}
