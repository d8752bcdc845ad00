/**
 * A catalogue's text as npm:yaml's document. Its syntax errors and warnings
 * become a {@linkcode CatalogueError} naming the card and field they fall in.
 *
 * @module
 */
import {
  type Document,
  isMap,
  isScalar,
  LineCounter,
  type Node,
  type Pair,
  parseDocument,
  type YAMLError,
  type YAMLMap,
} from "yaml";
import {
  CatalogueError,
  type CatalogueErrorOptions,
} from "./catalogue_error.ts";
import type { Context } from "./yaml_nodes.ts";

/**
 * Parses a catalogue with npm:yaml, keeping what turns node offsets into lines.
 *
 * @param text The YAML text.
 * @param file The name used in error messages.
 * @returns The document, its line counter and the file name.
 * @throws {CatalogueError} At the first YAML error or warning.
 *
 * @example
 * ```ts ignore
 * const { doc } = readYamlDocument("models: &m {}\n", "cat.yaml");
 * ```
 */
export function readYamlDocument(text: string, file: string): Context {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false });
  const ctx: Context = { file, doc, lines };
  const problem = doc.errors[0] ?? doc.warnings[0];
  if (problem) throw yamlProblem(ctx, text, problem);
  return ctx;
}

/** A YAML syntax error or warning as a CatalogueError naming the card and field it falls in when it can. */
function yamlProblem(
  ctx: Context,
  text: string,
  problem: YAMLError,
): CatalogueError {
  // An error found at the very end points at the last line that has text.
  const offset = Math.max(0, Math.min(problem.pos[0], text.trimEnd().length));
  const line = ctx.lines.linePos(offset).line;
  const duplicate = problem.code === "DUPLICATE_KEY";
  const where = locate(ctx.doc, offset, duplicate);
  let detail = `invalid YAML: ${problem.message}`;
  if (duplicate) {
    detail = `duplicate key '${
      where.key ?? text.slice(offset, problem.pos[1])
    }' (expected each key once in a mapping)`;
  } else if (problem.code === "MULTIPLE_DOCS") {
    detail =
      "invalid YAML: a second document starts here (expected one document)";
  }
  const options: CatalogueErrorOptions = { line, cause: problem };
  if (where.card !== undefined) options.card = where.card;
  if (where.field !== undefined) options.field = where.field;
  return new CatalogueError(ctx.file, detail, options);
}

/** What {@linkcode locate} finds at an offset. */
interface Location {
  card?: string;
  field?: string;
  /** The key that starts exactly at the offset, if one does. */
  key?: string;
}

/**
 * Whether a problem at `offset` lies in a pair: in its key or value text. A
 * problem found where a key starts usually belongs to what came before, so the
 * pair counts only when the problem is about the key itself (`atKey`).
 */
function spans(
  pair: Pair<unknown, unknown>,
  offset: number,
  atKey: boolean,
): boolean {
  const start = (pair.key as Node | null)?.range?.[0];
  const end = (pair.value as Node | null)?.range?.[2] ??
    (pair.key as Node | null)?.range?.[2];
  if (start === undefined || end === undefined) return false;
  return (atKey ? start <= offset : start < offset) && offset < end;
}

/** A pair's key as text (strings and numbers), noting it when it starts at the offset. */
function pairName(
  pair: Pair<unknown, unknown>,
  offset: number,
  found: Location,
): string | undefined {
  const value = isScalar(pair.key) ? pair.key.value : undefined;
  if (typeof value !== "string" && typeof value !== "number") return undefined;
  if ((pair.key as Node | null)?.range?.[0] === offset) {
    found.key = String(value);
  }
  return String(value);
}

/** Finds the card and field a YAML problem at an offset lies in. */
function locate(
  doc: Document.Parsed,
  offset: number,
  atKey: boolean,
): Location {
  const found: Location = {};
  const top = doc.contents;
  if (!isMap(top)) return found;
  const pair = top.items.find((p) => spans(p, offset, atKey));
  if (pair === undefined) return found;
  const field = pairName(pair, offset, found);
  if (field !== "models" || !isMap(pair.value)) {
    if (field !== undefined) found.field = field;
    return found;
  }
  const cardPair = (pair.value as YAMLMap).items.find((p) =>
    spans(p, offset, atKey)
  );
  if (cardPair === undefined) {
    found.field = "models";
    return found;
  }
  const card = pairName(cardPair, offset, found);
  if (card !== undefined) found.card = card;
  if (!isMap(cardPair.value)) return found;
  const fieldPair = (cardPair.value as YAMLMap).items.find((p) =>
    spans(p, offset, atKey)
  );
  const cardField = fieldPair && pairName(fieldPair, offset, found);
  if (cardField !== undefined) found.field = cardField;
  return found;
}
