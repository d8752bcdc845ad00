/**
 * The catalogue's errors, and the close-name suggestions their messages make.
 * Public through `@mymodel/serve/catalogue`.
 *
 * @module
 */

/**
 * Thrown when a model name is not in the catalogue. The message suggests close
 * names, or lists the known ones when nothing is close.
 *
 * @example
 * ```ts
 * import { KeyError } from "@mymodel/serve/catalogue";
 *
 * const error = new KeyError("lama-3", ["llama-3", "bge-m3"]);
 * console.log(error.message);
 * // Unknown model 'lama-3': not in the catalogue (did you mean llama-3?)
 * ```
 */
export class KeyError extends Error {
  /** The name that was looked up. */
  readonly model: string;
  /** Up to three catalogue names close to {@linkcode KeyError.model}, closest first. */
  readonly suggestions: string[];

  /**
   * Builds the error and its suggestions.
   *
   * @param model The name that was looked up.
   * @param known Every name in the catalogue.
   * @param options Standard error options (`cause`).
   */
  constructor(model: string, known: Iterable<string>, options?: ErrorOptions) {
    const names = [...known].sort();
    const suggestions = closeMatches(model, names);
    super(
      `Unknown model '${model}': not in the catalogue (${
        suggestions.length > 0
          ? `did you mean ${orList(suggestions)}?`
          : `known: ${knownList(names)}`
      })`,
      options,
    );
    this.name = "KeyError";
    this.model = model;
    this.suggestions = suggestions;
  }
}

/** Where in a catalogue a {@linkcode CatalogueError} happened, and what caused it. */
export interface CatalogueErrorOptions {
  /** The catalogue name of the card at fault. */
  card?: string;
  /** The field at fault (`verb`, `args.max-model-len`, `command[0]`, ...). */
  field?: string;
  /** The 1-based line at fault. */
  line?: number;
  /** The underlying error, kept as `cause`. */
  cause?: unknown;
}

/**
 * Thrown when a catalogue cannot be read or is not valid. The message is one line:
 * `Cannot load catalogue <file>: card '<card>', field '<field>' (line <n>): <what was expected>`.
 *
 * @example
 * ```ts
 * import { CatalogueError, Registry } from "@mymodel/serve/catalogue";
 *
 * try {
 *   Registry.parse("models:\n  x:\n    verb: talk\n    hub: a/b\n", "x.yaml");
 * } catch (error) {
 *   if (error instanceof CatalogueError) console.log(error.card, error.field, error.line); // x verb 3
 * }
 * ```
 */
export class CatalogueError extends Error {
  /** The catalogue file (or URL, or `<inline>`). */
  readonly file: string;
  /** The catalogue name of the card at fault, if one is. */
  readonly card?: string;
  /** The field at fault, if one is. */
  readonly field?: string;
  /** The 1-based line at fault, if known. */
  readonly line?: number;

  /**
   * Builds the one-line message from its parts.
   *
   * @param file The catalogue file.
   * @param detail What was wrong and what was expected.
   * @param options Where it happened, and the underlying error.
   */
  constructor(
    file: string,
    detail: string,
    options: CatalogueErrorOptions = {},
  ) {
    const { card, field, line, cause } = options;
    const where = [
      card === undefined ? "" : `card '${card}'`,
      field === undefined ? "" : `field '${field}'`,
    ].filter(Boolean).join(", ");
    const at = line === undefined
      ? ""
      : where
      ? ` (line ${line})`
      : `line ${line}`;
    const prefix = where + at;
    super(
      oneLine(
        `Cannot load catalogue ${file}: ${
          prefix ? `${prefix}: ` : ""
        }${detail}`,
      ),
      cause === undefined ? undefined : { cause },
    );
    this.name = "CatalogueError";
    this.file = file;
    if (card !== undefined) this.card = card;
    if (field !== undefined) this.field = field;
    if (line !== undefined) this.line = line;
  }
}

// ---------------------------------------------------------------------------
// Message helpers, shared with the card reader.

export function oneLine(text: string): string {
  return text.replace(/\s*[\r\n]+\s*/g, " ");
}

function orList(items: readonly string[]): string {
  return items.length <= 1
    ? items.join("")
    : `${items.slice(0, -1).join(", ")} or ${items.at(-1)}`;
}

function knownList(names: readonly string[]): string {
  return names.length > 0 ? names.join(", ") : "none";
}

/** ` (did you mean x?)` when a close match exists, else the empty string. */
export function hint(value: string, allowed: readonly string[]): string {
  const [best] = closeMatches(value, allowed);
  return best === undefined ? "" : `; did you mean ${best}?`;
}

/** Up to `max` names close to `query` (edit distance or substring), closest first. */
export function closeMatches(
  query: string,
  names: readonly string[],
  max = 3,
): string[] {
  const q = query.toLowerCase();
  if (q === "") return [];
  const scored: [number, string][] = [];
  for (const name of names) {
    const n = name.toLowerCase();
    const distance = editDistance(q, n);
    const limit = Math.max(1, Math.floor(Math.max(q.length, n.length) / 3));
    if (distance <= limit && distance < Math.max(q.length, n.length)) {
      scored.push([distance, name]);
    } else if (
      q.length >= 3 && n.length >= 3 && (n.includes(q) || q.includes(n))
    ) {
      scored.push([100 + Math.abs(n.length - q.length), name]);
    }
  }
  scored.sort((a, b) =>
    a[0] - b[0] || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0)
  );
  return scored.slice(0, max).map(([, name]) => name);
}

/** Optimal string alignment distance: insertions, deletions, substitutions, adjacent swaps. */
function editDistance(a: string, b: string): number {
  const width = b.length + 1;
  const d = new Array<number>((a.length + 1) * width).fill(0);
  for (let i = 0; i <= a.length; i++) d[i * width] = i;
  for (let j = 0; j <= b.length; j++) d[j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(
        d[(i - 1) * width + j]! + 1,
        d[i * width + j - 1]! + 1,
        d[(i - 1) * width + j - 1]! + cost,
      );
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        best = Math.min(best, d[(i - 2) * width + j - 2]! + 1);
      }
      d[i * width + j] = best;
    }
  }
  return d[a.length * width + b.length]!;
}
