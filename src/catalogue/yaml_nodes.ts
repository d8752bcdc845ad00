/**
 * Reading npm:yaml's nodes for the card reader: following aliases, describing
 * values for "got ..." in messages, and turning a node's problem into a
 * {@linkcode CatalogueError} with its card, field and line.
 *
 * @module
 */
import {
  type Alias,
  type Document,
  isAlias,
  isMap,
  isScalar,
  isSeq,
  type LineCounter,
  type Node,
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
  /** The node each alias names, found in one walk (npm:yaml's `resolve` walks the document per alias). */
  readonly aliases: Map<Alias, Node>;
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

/** The 1-based line a node starts on; `undefined` for no node. */
export function lineOf(ctx: Context, node: unknown): number | undefined {
  const range = (node as Node | null | undefined)?.range;
  return range ? ctx.lines.linePos(range[0]).line : undefined;
}

/** Follows an alias to the node it names; every other node is returned as is. */
export function deref(ctx: Context, where: Where, node: unknown): unknown {
  if (!isAlias(node)) return node;
  const target = ctx.aliases.get(node);
  if (target === undefined) {
    fail(
      ctx,
      where,
      `unknown anchor '${node.source}' (expected an anchor defined earlier with &${node.source})`,
    );
  }
  return target;
}

/** How many nodes {@linkcode plainValue} reads for one value at most: aliases can repeat a subtree exponentially. */
const MAX_PLAIN_NODES = 10_000;

/**
 * A mapping or list as plain data for JSON text, aliases followed through
 * `ctx.aliases` (npm:yaml's `toJS` walks the whole document for each alias).
 */
export function plainValue(ctx: Context, where: Where, node: unknown): unknown {
  let budget = MAX_PLAIN_NODES;
  function plain(node: unknown): unknown {
    if (--budget < 0) {
      fail(
        ctx,
        where,
        `value too large once its aliases are followed (expected at most ${MAX_PLAIN_NODES} items)`,
      );
    }
    const value = deref(ctx, where, node);
    if (isSeq(value)) return value.items.map(plain);
    if (!isMap(value)) return scalarValue(value) ?? null;
    // No prototype: a key `__proto__` stays a key.
    const out: Record<string, unknown> = Object.create(null);
    for (const pair of value.items) {
      const key = plain(pair.key);
      out[
        typeof key === "object" && key !== null
          ? JSON.stringify(key)
          : String(key ?? "")
      ] = plain(pair.value);
    }
    return out;
  }
  return plain(node);
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
