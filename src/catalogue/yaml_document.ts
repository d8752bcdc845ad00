/**
 * A catalogue's text as npm:yaml's document. Its syntax errors and warnings,
 * and keys written twice, become a {@linkcode CatalogueError} naming the card
 * and field they fall in.
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
import {
  CatalogueError,
  type CatalogueErrorOptions,
} from "./catalogue_error.ts";
import { type Context, fail, lineOf, type Where } from "./yaml_nodes.ts";

/**
 * Parses a catalogue with npm:yaml, keeping what turns node offsets into lines
 * and the node each alias names.
 *
 * npm:yaml's own duplicate-key check compares each key with every earlier one
 * of its mapping, and its `Alias.resolve` walks the whole document once per
 * alias: both are quadratic in the number of cards. One walk here does both.
 *
 * @param text The YAML text.
 * @param file The name used in error messages.
 * @returns The document, its line counter, its aliases and the file name.
 * @throws {CatalogueError} At the first YAML error or warning, or repeated key.
 *
 * @example
 * ```ts ignore
 * const { doc } = readYamlDocument("models: &m {}\n", "cat.yaml");
 * ```
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

/**
 * Visits every node in document order (as npm:yaml resolves aliases: the last
 * anchor of that name before the alias), noting each alias's node, and throws
 * at the first key repeated in a mapping.
 */
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

/** The error for a key written twice in one mapping, named by where it is. */
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

/** `args`, `args.limit-mm-per-prompt`, `command[0]`: path parts as messages name a field. */
function fieldPath(parts: readonly string[]): string {
  return parts.map((p, i) => i === 0 || p.startsWith("[") ? p : `.${p}`).join(
    "",
  );
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
  const where = locate(ctx.doc, offset);
  const detail = problem.code === "MULTIPLE_DOCS"
    ? "invalid YAML: a second document starts here (expected one document)"
    : `invalid YAML: ${problem.message}`;
  const options: CatalogueErrorOptions = { line, cause: problem };
  if (where.card !== undefined) options.card = where.card;
  if (where.field !== undefined) options.field = where.field;
  return new CatalogueError(ctx.file, detail, options);
}

/** What {@linkcode locate} finds at an offset. */
interface Location {
  card?: string;
  field?: string;
}

/**
 * Whether a problem at `offset` lies in a pair: in its key or value text. A
 * problem found where a key starts belongs to what came before.
 */
function spans(pair: Pair<unknown, unknown>, offset: number): boolean {
  const start = (pair.key as Node | null)?.range?.[0];
  const end = (pair.value as Node | null)?.range?.[2] ??
    (pair.key as Node | null)?.range?.[2];
  if (start === undefined || end === undefined) return false;
  return start < offset && offset < end;
}

/** A pair's key as text (strings and numbers). */
function pairName(pair: Pair<unknown, unknown>): string | undefined {
  const value = isScalar(pair.key) ? pair.key.value : undefined;
  if (typeof value !== "string" && typeof value !== "number") return undefined;
  return String(value);
}

/** Finds the card and field a YAML problem at an offset lies in. */
function locate(doc: Document.Parsed, offset: number): Location {
  const found: Location = {};
  const top = doc.contents;
  if (!isMap(top)) return found;
  const pair = top.items.find((p) => spans(p, offset));
  if (pair === undefined) return found;
  const field = pairName(pair);
  if (field !== "models" || !isMap(pair.value)) {
    if (field !== undefined) found.field = field;
    return found;
  }
  const cardPair = (pair.value as YAMLMap).items.find((p) => spans(p, offset));
  if (cardPair === undefined) {
    found.field = "models";
    return found;
  }
  const card = pairName(cardPair);
  if (card !== undefined) found.card = card;
  if (!isMap(cardPair.value)) return found;
  const fieldPair = (cardPair.value as YAMLMap).items.find((p) =>
    spans(p, offset)
  );
  const cardField = fieldPair && pairName(fieldPair);
  if (cardField !== undefined) found.field = cardField;
  return found;
}
