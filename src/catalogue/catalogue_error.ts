/**
 * The catalogue's errors, and the close-name suggestions their messages make.
 * Public through `@mymodel/serve/catalogue`.
 *
 * @module
 */
import { closeMatches, orList } from "../common/close_matches.ts";
import { foldLines } from "../common/one_line.ts";
import { InputError } from "../common/config_error.ts";

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
export class KeyError extends InputError {
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
export class CatalogueError extends InputError {
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
      foldLines(
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

function knownList(names: readonly string[]): string {
  return names.length > 0 ? names.join(", ") : "none";
}

/** ` (did you mean x?)` when a close match exists, else the empty string. */
export function hint(value: string, allowed: readonly string[]): string {
  const [best] = closeMatches(value, allowed);
  return best === undefined ? "" : `; did you mean ${best}?`;
}
