/**
 * Reading YAML nodes for the card reader: following aliases, describing values
 * for "got ..." in messages, and turning a node or a YAML syntax problem into a
 * {@linkcode CatalogueError} with its card, field and line.
 *
 * @module
 */
import {
  type Document,
  isAlias,
  isMap,
  isScalar,
  isSeq,
  type LineCounter,
  type Node,
  type Pair,
  type YAMLError,
  type YAMLMap,
} from "yaml";
import {
  CatalogueError,
  type CatalogueErrorOptions,
} from "./catalogue_error.ts";

/** What validation needs to read nodes and report where they are. */
export interface Context {
  readonly file: string;
  readonly doc: Document.Parsed;
  readonly lines: LineCounter;
}

/** A field's value node (aliases followed) and where to report problems with it. */
export interface FieldValue {
  value: unknown;
  where: Where;
}

/** Where a problem is: the card, the field, and the node whose line is reported. */
export interface Where {
  card?: string | undefined;
  field?: string | undefined;
  node?: unknown;
}

/** Throws the CatalogueError for a problem at `where`. */
export function fail(ctx: Context, where: Where, detail: string): never {
  const line = lineOf(ctx, where.node);
  const options: CatalogueErrorOptions = {};
  if (where.card !== undefined) options.card = where.card;
  if (where.field !== undefined) options.field = where.field;
  if (line !== undefined) options.line = line;
  throw new CatalogueError(ctx.file, detail, options);
}

export function lineOf(ctx: Context, node: unknown): number | undefined {
  const range = (node as Node | null | undefined)?.range;
  return range ? ctx.lines.linePos(range[0]).line : undefined;
}

/** Follows an alias to the node it names; every other node is returned as is. */
export function deref(ctx: Context, where: Where, node: unknown): unknown {
  if (!isAlias(node)) return node;
  const target = node.resolve(ctx.doc);
  if (target === undefined) {
    fail(
      ctx,
      where,
      `unknown anchor '${node.source}' (expected an anchor defined earlier with &${node.source})`,
    );
  }
  return target;
}

/** A short description of a node for "got ..." in messages. */
export function describe(node: unknown): string {
  if (node === null || node === undefined) return "nothing";
  if (isMap(node)) return "a mapping";
  if (isSeq(node)) return "a list";
  if (isScalar(node)) {
    const value = node.value;
    if (value === null || value === undefined) return "null";
    if (typeof value === "string") return `'${clip(value)}'`;
    return String(value);
  }
  return "an unsupported value";
}

export function clip(text: string): string {
  const escaped = JSON.stringify(text).slice(1, -1);
  return escaped.length > 60 ? `${escaped.slice(0, 57)}...` : escaped;
}

export function scalarValue(node: unknown): unknown {
  return isScalar(node) ? node.value : undefined;
}

/** A mapping key as text; keys must be strings. */
export function keyText(ctx: Context, where: Where, key: unknown): string {
  const value = scalarValue(deref(ctx, where, key));
  if (typeof value !== "string") {
    fail(
      ctx,
      { ...where, node: key },
      `expected a string key, got ${describe(deref(ctx, where, key))}`,
    );
  }
  return value;
}

/** Reports a YAML syntax error or warning, naming the card and field it falls in when it can. */
export function yamlProblem(
  ctx: Context,
  text: string,
  problem: YAMLError,
): never {
  // An error found at the very end points at the last line that has text.
  const offset = Math.max(0, Math.min(problem.pos[0], text.trimEnd().length));
  const line = ctx.lines.linePos(offset).line;
  const duplicate = problem.code === "DUPLICATE_KEY";
  const where = locate(ctx, offset, duplicate);
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
  throw new CatalogueError(ctx.file, detail, options);
}

/** What {@linkcode locate} finds at an offset. */
export interface Location {
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
  const value = scalarValue(pair.key);
  if (typeof value !== "string" && typeof value !== "number") return undefined;
  if ((pair.key as Node | null)?.range?.[0] === offset) {
    found.key = String(value);
  }
  return String(value);
}

/** Finds the card and field a YAML problem at an offset lies in. */
function locate(ctx: Context, offset: number, atKey: boolean): Location {
  const found: Location = {};
  const top = ctx.doc.contents;
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
