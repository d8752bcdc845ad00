// The footprint book, `<directory>/data/footprints.json`: each card's last
// footprint (per its model and the flags that change its memory) per device
// name, so that a plan knows what a model takes before it starts. Replaced
// whole (atomic_write.ts); the oldest entries dropped past BOOK_ENTRIES.
import type { ModelCard } from "../catalogue.ts";
import { writeFileAtomicSync } from "../common/atomic_write.ts";
import { readFileCapped } from "../common/read_capped.ts";
import { log } from "../common/log.ts";
import type { Footprint } from "../engines/footprint.ts";
import { ENGINE_KINDS } from "../engines/kinds.ts";
import { launcherSleep } from "../engines/sleep_after.ts";
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

// 256 entries take about 100 KiB.
const MAX_BYTES = 2 ** 20;
// 1 PiB, as `gpu_memory`: no device holds more.
const MAX_MIB = 2 ** 30;
const MIB_FIELDS = [
  "weights_mib",
  "kv_cache_mib",
  "kv_tokens",
  "graphs_mib",
  "compute_mib",
  "total_mib",
  "residue_mib",
] as const;

/**
 * The book's entries, read with no side effect and without blocking (a FIFO
 * or a device there is no book); `unreadable`: why the file there is no book.
 */
export async function readBook(
  directory: string,
  signal?: AbortSignal,
): Promise<ReadBook> {
  const no = (why: string) => ({ entries: [], unreadable: why });
  try {
    const read = await readFileCapped(bookPath(directory), MAX_BYTES, signal);
    if ("not" in read) return no(`it is ${read.not} (expected a regular file)`);
    if (read.text === undefined) {
      return no(
        `it holds more than 1 MiB (expected at most ${BOOK_ENTRIES} entries)`,
      );
    }
    const data = JSON.parse(read.text);
    if (data?.format !== FORMAT || !Array.isArray(data.entries)) {
      return no(`not a "${FORMAT}" file`);
    }
    const entries = data.entries as unknown[];
    for (const [i, entry] of entries.entries()) {
      const bad = badField(entry);
      if (bad) return no(`entry ${i + 1}: ${bad}`);
    }
    return { entries: entries as BookEntry[] };
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return { entries: [] };
    const why = error instanceof SyntaxError ? "not JSON" : "unreadable";
    return no(`${why} (${(error as Error).message})`);
  }
}

/** The first field of an entry that is not what a book holds, and what was expected. */
function badField(entry: unknown): string | undefined {
  const e = (entry ?? {}) as Record<string, unknown>;
  const f = (e.footprint ?? {}) as Record<string, unknown>;
  const text = (v: unknown) => typeof v === "string";
  const mib = (v: unknown) =>
    v === null || typeof v === "number" && v >= 0 && v <= MAX_MIB;
  const time = (v: unknown) =>
    text(v) && !Number.isNaN(Date.parse(v as string));
  const fields: [string, unknown, (v: unknown) => boolean, string][] = [
    ["key", e.key, text, "a string"],
    ["device", e.device, text, "a string"],
    ...MIB_FIELDS.map((name): [string, unknown, typeof mib, string] => [
      name,
      // Only a sleeper has a residue.
      name === "residue_mib" && !(name in f) ? null : f[name],
      mib,
      `null or a number from 0 to ${MAX_MIB}`,
    ]),
    ["measured_at", f.measured_at, time, "an ISO time"],
    ["from", f.from, text, "a string"],
  ];
  const bad = fields.find(([, value, ok]) => !ok(value));
  // Infinity (`1e400` to JSON.parse) shown as itself, not as JSON's `null`.
  const shown = (v: unknown) =>
    (typeof v === "number" ? String(v) : JSON.stringify(v) ?? "undefined")
      .slice(0, 40);
  return bad && `${bad[0]} ${shown(bad[1])} (expected ${bad[3]})`;
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
  const kind = ENGINE_KINDS[card.engine];
  const routes = launcherSleep(card, kind);
  const book = Object.entries(measuredOf(entries, card));
  const residue = routes && {
    residue: {
      measured: Object.fromEntries(
        book.flatMap(([device, f]) =>
          f.residue_mib == null ? [] : [[device, f.residue_mib]]
        ),
      ),
      estimate: routes.residueMiB,
    },
  };
  if (card.gpuMemory !== undefined) {
    return { budgetMiB: card.gpuMemory / 2 ** 20, ...residue };
  }
  if (!kind?.sizing?.packs) return residue;
  const measured = book.filter(([, f]) => f.total_mib !== null)
    .map(([device, f]) => [device, f.total_mib!]);
  return measured.length
    ? { measured: Object.fromEntries(measured), ...residue }
    : residue;
}

/** The launcher's book: a file there that is no book is moved aside (one warning), never overwritten. */
export class FootprintBook {
  #path: string | undefined;
  #entries: BookEntry[];

  /** `read`: the book as the plan's facts read it ({@linkcode readBook}). */
  constructor(directory: string, read: ReadBook = { entries: [] }) {
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
    const same = (e: BookEntry) => e.key === key && e.device === device;
    // An awake run's figures keep what its last sleep measured it keeps.
    const residue_mib = footprint.residue_mib ??
      this.#entries.find(same)?.footprint.residue_mib;
    if (residue_mib != null) footprint = { ...footprint, residue_mib };
    this.#entries = [
      ...this.#entries.filter((e) => !same(e)),
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
