/**
 * A catalogue's text as npm:yaml's document, and its nodes as the card reader
 * reads them; every problem a {@linkcode CatalogueError} naming the card,
 * field and line.
 *
 * @module
 */
import {
  type Alias,
  type Document,
  isAlias,
  isMap,
  isNode,
  isScalar,
  isSeq,
  LineCounter,
  type Node,
  type Pair,
  parseDocument,
  type YAMLError,
  type YAMLMap,
} from "yaml";
import { CatalogueError } from "./catalogue_error.ts";

export interface Context {
  readonly file: string;
  readonly doc: Document.Parsed;
  readonly lines: LineCounter;
  /** Found in one walk: npm:yaml's `resolve` walks the document per alias. */
  readonly aliases: Map<Alias, Node>;
}

/** A value node, aliases followed. */
export interface FieldValue {
  value: unknown;
  where: Where;
}

/** `node` gives the line. */
export interface Where {
  card?: string | undefined;
  field?: string | undefined;
  node?: unknown;
}

export function fail(ctx: Context, where: Where, detail: string): never {
  throw new CatalogueError(ctx.file, detail, {
    card: where.card,
    field: where.field,
    line: lineOf(ctx, where.node),
  });
}

export function lineOf(ctx: Context, node: unknown): number | undefined {
  const range = (node as Node | null | undefined)?.range;
  return range ? ctx.lines.linePos(range[0]).line : undefined;
}

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

/** Aliases can repeat a subtree exponentially. */
const MAX_PLAIN_NODES = 10_000;

/** For JSON text; npm:yaml's `toJS` would walk the whole document for each alias. */
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

/** For "got ..." in messages. */
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

/**
 * npm:yaml's own duplicate-key check compares each key with every earlier one
 * of its mapping, and its `Alias.resolve` walks the whole document once per
 * alias: both are quadratic in the number of cards. One walk here does both.
 */
export function readYamlDocument(text: string, file: string): Context {
  const lines = new LineCounter();
  const doc = parseDocument(text, {
    lineCounter: lines,
    prettyErrors: false,
    uniqueKeys: false,
  });
  const aliases = new Map<Alias, Node>();
  const ctx: Context = { file, doc, lines, aliases };
  const problem = doc.errors[0] ?? doc.warnings[0];
  if (problem) throw yamlProblem(ctx, text, problem);
  walk(ctx, doc.contents, [], new Map());
  return ctx;
}

/** In document order, as npm:yaml resolves aliases: the last anchor of that name before the alias. */
function walk(
  ctx: Context,
  node: unknown,
  path: readonly string[],
  anchors: Map<string, Node>,
): void {
  if (isAlias(node)) {
    const target = anchors.get(node.source);
    if (target !== undefined) ctx.aliases.set(node, target);
    return;
  }
  if (!isNode(node)) return;
  if (node.anchor) anchors.set(node.anchor, node);
  if (isSeq(node)) {
    node.items.forEach((item, i) =>
      walk(ctx, item, [...path, `[${i}]`], anchors)
    );
  } else if (isMap(node)) {
    const seen = new Map<unknown, Node>();
    for (const pair of node.items) {
      walk(ctx, pair.key, path, anchors);
      const keyNode = isAlias(pair.key) ? ctx.aliases.get(pair.key) : pair.key;
      const key = isScalar(keyNode) ? keyNode.value : undefined;
      const first = key === undefined ? undefined : seen.get(key);
      if (first !== undefined) {
        duplicate(ctx, path, String(key), pair.key, first);
      }
      if (key !== undefined) seen.set(key, pair.key as Node);
      walk(ctx, pair.value, [...path, String(key)], anchors);
    }
  }
}

function duplicate(
  ctx: Context,
  path: readonly string[],
  key: string,
  node: unknown,
  first: Node,
): never {
  const [top, card, ...inCard] = path;
  const where: Where = { node };
  let expected = "each key once in a mapping";
  if (top !== "models") where.field = fieldPath(path) || key;
  else if (card === undefined) {
    where.card = key;
    expected = "each card name once";
  } else {
    where.card = card;
    where.field = fieldPath(inCard) || key;
    if (inCard.length === 0) expected = "each field once in a card";
    else if (inCard.length === 1 && inCard[0] === "args") {
      expected = "each flag once in args";
    } else if (inCard.length === 1 && inCard[0] === "env") {
      expected = "each variable once in env";
    }
  }
  fail(
    ctx,
    where,
    `duplicate key '${key}' (expected ${expected}; the first is on line ${
      lineOf(ctx, first)
    })`,
  );
}

/** `args.limit-mm-per-prompt`, `command[0]`. */
function fieldPath(parts: readonly string[]): string {
  return parts.map((p, i) => i === 0 || p.startsWith("[") ? p : `.${p}`).join(
    "",
  );
}

function yamlProblem(
  ctx: Context,
  text: string,
  problem: YAMLError,
): CatalogueError {
  // An error found at the very end points at the last line that has text.
  const offset = Math.max(0, Math.min(problem.pos[0], text.trimEnd().length));
  const line = ctx.lines.linePos(offset).line;
  const where = locate(ctx.doc, offset);
  const detail = problem.code === "MULTIPLE_DOCS"
    ? "invalid YAML: a second document starts here (expected one document)"
    : `invalid YAML: ${problem.message}`;
  return new CatalogueError(ctx.file, detail, {
    ...where,
    line,
    cause: problem,
  });
}

/** A problem found where a key starts belongs to what came before. */
function spans(pair: Pair<unknown, unknown>, offset: number): boolean {
  const start = (pair.key as Node | null)?.range?.[0];
  const end = (pair.value as Node | null)?.range?.[2] ??
    (pair.key as Node | null)?.range?.[2];
  if (start === undefined || end === undefined) return false;
  return start < offset && offset < end;
}

function pairName(pair: Pair<unknown, unknown>): string | undefined {
  const value = isScalar(pair.key) ? pair.key.value : undefined;
  if (typeof value !== "string" && typeof value !== "number") return undefined;
  return String(value);
}

function locate(doc: Document.Parsed, offset: number): Where {
  const path: (string | undefined)[] = [];
  let node: unknown = doc.contents;
  while (isMap(node) && path.length < 3) {
    const pair = (node as YAMLMap).items.find((p) => spans(p, offset));
    if (pair === undefined) break;
    path.push(pairName(pair));
    node = pair.value;
  }
  const [top, card, field] = path;
  if (top !== "models") return { field: top };
  return path.length === 1 ? { field: "models" } : { card, field };
}
