/**
 * The catalogue's errors, and the close-name suggestions their messages make.
 *
 * @module
 */
import { closeMatches, orList } from "../common/close_matches.ts";
import { foldLines } from "../common/one_line.ts";
import { InputError } from "../common/config_error.ts";

/**
 * A model name is not in the catalogue; the message suggests close names, or
 * lists the first few.
 *
 * @example
 * ```ts
 * import { KeyError } from "@mymodel/serve/catalogue";
 *
 * const error = new KeyError("lama-3", ["llama-3", "bge-m3"], { catalogue: "models.yaml" });
 * console.log(error.message);
 * // Unknown model 'lama-3': not in the catalogue models.yaml (did you mean llama-3?)
 * ```
 */
export class KeyError extends InputError {
  /** The name that was looked up. */
  readonly model: string;
  /** Up to three close catalogue names, closest first. */
  readonly suggestions: string[];
  /** The catalogue looked in, when the thrower said. */
  readonly catalogue?: string;

  /**
   * Creates the error.
   *
   * @param model The name that was looked up.
   * @param known Every name in the catalogue.
   * @param options The catalogue, and the `cause`.
   */
  constructor(
    model: string,
    known: Iterable<string>,
    options: ErrorOptions & {
      /** The catalogue looked in, named in the message. */
      catalogue?: string;
      /** The shipped catalogue: the message says so and points at `--catalogue`. */
      shipped?: boolean;
    } = {},
  ) {
    const { catalogue, shipped = false, ...errorOptions } = options;
    const names = [...known].sort();
    const suggestions = closeMatches(model, names);
    const which = shipped ? "the shipped catalogue" : "the catalogue";
    const own =
      "a model of your own, write a catalogue and pass it with --catalogue";
    super(
      `Unknown model '${model}': not in ${which}${
        catalogue === undefined ? "" : ` ${catalogue}`
      } (${
        suggestions.length > 0
          ? `did you mean ${orList(suggestions)}?${
            shipped ? ` For ${own}` : ""
          }`
          : `known: ${knownList(names)}${shipped ? `; for ${own}` : ""}`
      })`,
      errorOptions,
    );
    this.name = "KeyError";
    this.model = model;
    this.suggestions = suggestions;
    if (catalogue !== undefined) this.catalogue = catalogue;
  }
}

/**
 * A catalogue cannot be read or is not valid, in one line:
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
  /** The card at fault, if one is. */
  readonly card?: string;
  /** The field at fault, if one is. */
  readonly field?: string;
  /** The 1-based line, if known. */
  readonly line?: number;

  /**
   * Creates the error.
   *
   * @param file The catalogue file.
   * @param detail What was wrong and what was expected.
   * @param options Where it happened, and the cause.
   */
  constructor(
    file: string,
    detail: string,
    options: {
      /** The card at fault. */
      card?: string | undefined;
      /** The field at fault (`verb`, `args.max-model-len`, `command[0]`, ...). */
      field?: string | undefined;
      /** The 1-based line. */
      line?: number | undefined;
      /** The underlying error. */
      cause?: unknown;
    } = {},
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

/** How many names a KeyError lists: a catalogue of thousands made a line of 70 KB. */
const KNOWN_SHOWN = 10;

function knownList(names: readonly string[]): string {
  if (names.length === 0) return "none";
  if (names.length <= KNOWN_SHOWN) return names.join(", ");
  return `${names.slice(0, KNOWN_SHOWN).join(", ")} and ${
    names.length - KNOWN_SHOWN
  } more`;
}

export function hint(value: string, allowed: readonly string[]): string {
  const [best] = closeMatches(value, allowed);
  return best === undefined ? "" : `; did you mean ${best}?`;
}
