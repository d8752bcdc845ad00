import { closeMatches, orList } from "../common/close_matches.ts";
import { foldLines } from "../common/one_line.ts";
import { InputError } from "../common/config_error.ts";

/** How many names a KeyError lists: a catalogue of thousands made a line of 70 KB. */
const KNOWN_SHOWN = 10;

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

  /** `known`: every name in the catalogue. */
  constructor(
    model: string,
    known: Iterable<string>,
    // `shipped`: the message says so and points at --catalogue.
    options: ErrorOptions & { catalogue?: string; shipped?: boolean } = {},
  ) {
    const { catalogue, shipped = false, ...errorOptions } = options;
    const names = [...known].sort();
    const suggestions = closeMatches(model, names);
    const which = shipped ? "the shipped catalogue" : "the catalogue";
    const own = shipped
      ? "a model of your own, write a catalogue and pass it with --catalogue"
      : "";
    const more = names.length - KNOWN_SHOWN;
    const tail = more > 0 ? ` and ${more} more` : "";
    const listed = `${names.slice(0, KNOWN_SHOWN).join(", ") || "none"}${tail}`;
    const help = suggestions.length > 0
      ? `did you mean ${orList(suggestions)}?${own && ` For ${own}`}`
      : `known: ${listed}${own && `; for ${own}`}`;
    const where = catalogue === undefined ? which : `${which} ${catalogue}`;
    super(`Unknown model '${model}': not in ${where} (${help})`, errorOptions);
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

  /** `detail`: what was wrong and what was expected. */
  constructor(
    file: string,
    detail: string,
    { card, field, line, cause }: {
      card?: string | undefined;
      field?: string | undefined;
      line?: number | undefined;
      cause?: unknown;
    } = {},
  ) {
    let where = [
      card === undefined ? [] : `card '${card}'`,
      field === undefined ? [] : `field '${field}'`,
    ].flat().join(", ");
    if (line !== undefined) {
      where = where ? `${where} (line ${line})` : `line ${line}`;
    }
    const at = where && `${where}: `;
    const message = foldLines(`Cannot load catalogue ${file}: ${at}${detail}`);
    super(message, cause === undefined ? undefined : { cause });
    this.name = "CatalogueError";
    this.file = file;
    if (card !== undefined) this.card = card;
    if (field !== undefined) this.field = field;
    if (line !== undefined) this.line = line;
  }
}

/** A requested card refers to a variable the launcher's environment does not set. */
export class UnsetVariableError extends Error {
  override name = "UnsetVariableError";

  constructor(
    readonly file: string,
    readonly card: string,
    readonly field: string,
    readonly line: number,
    readonly variable: string,
  ) {
    super(
      `Cannot expand catalogue ${file}: card '${card}', field '${field}' (line ${line}): \${${variable}} is not set (expected ${variable} in the launcher's environment; write $\${ for a literal \${)`,
    );
  }
}

/** `; did you mean x?`, or nothing. */
export function hint(value: string, allowed: readonly string[]): string {
  const [best] = closeMatches(value, allowed);
  return best === undefined ? "" : `; did you mean ${best}?`;
}
