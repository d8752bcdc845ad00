// A catalogue's YAML as the card reader reads it; every problem a CatalogueError naming the card, field and line.
import {
  type Alias,
  isAlias,
  isMap,
  isNode,
  isScalar,
  isSeq,
  LineCounter,
  type Node,
  parseDocument,
  type YAMLError,
  type YAMLMap,
  type YAMLSeq,
} from "yaml";
import { CatalogueError } from "./catalogue_error.ts";

/** Where a message points; `node` gives the line. */
export interface Where {
  card?: string | undefined;
  field?: string | undefined;
  node?: unknown;
}

/** What a duplicate key breaks, by where it is in a card. */
const ONCE_IN = new Map([
  ["", "each field once in a card"],
  ["args", "each flag once in args"],
  ["env", "each variable once in env"],
]);

/** Aliases can repeat a subtree exponentially. */
const MAX_PLAIN_NODES = 10_000;
const MAX_PLAIN_DEPTH = 1_000;

// npm:yaml's duplicate-key check and its `Alias.resolve` are both quadratic in the number of cards: one walk here does both.
export class Context {
  readonly contents: unknown;
  #lines = new LineCounter();
  #aliases = new Map<Alias, Node>();

  constructor(text: string, readonly file: string) {
    const doc = parseDocument(text, {
      lineCounter: this.#lines,
      prettyErrors: false,
      uniqueKeys: false,
    });
    this.contents = doc.contents;
    const problem = doc.errors[0] ?? doc.warnings[0];
    if (problem) throw this.#yamlProblem(text, problem);
    this.#walk(doc.contents, [], new Map());
  }

  fail(where: Where, detail: string): never {
    const line = this.lineOf(where.node);
    throw new CatalogueError(this.file, detail, { ...where, line });
  }

  lineOf(node: unknown): number | undefined {
    const range = (node as Node | null | undefined)?.range;
    return range ? this.#lines.linePos(range[0]).line : undefined;
  }

  deref(where: Where, node: unknown): unknown {
    if (!isAlias(node)) return node;
    return this.#aliases.get(node) ?? this.fail(
      where,
      `unknown anchor '${node.source}' (expected an anchor defined earlier with &${node.source})`,
    );
  }

  /** In document order, as npm:yaml resolves aliases: the last anchor of that name before the alias. */
  #walk(node: unknown, path: readonly string[], anchors: Map<string, Node>) {
    if (isAlias(node)) {
      const target = anchors.get(node.source);
      if (target !== undefined) this.#aliases.set(node, target);
      return;
    }
    if (!isNode(node)) return;
    if (node.anchor) anchors.set(node.anchor, node);
    if (isSeq(node)) {
      node.items.forEach((item, i) =>
        this.#walk(item, [...path, `[${i}]`], anchors)
      );
    } else if (isMap(node)) {
      const seen = new Map<unknown, Node>();
      for (const pair of node.items) {
        this.#walk(pair.key, path, anchors);
        const keyNode = this.#aliases.get(pair.key as Alias) ?? pair.key;
        const key = isScalar(keyNode) ? keyNode.value : undefined;
        const first = key === undefined ? undefined : seen.get(key);
        if (first !== undefined) {
          this.#duplicate(path, String(key), pair.key, first);
        }
        if (key !== undefined) seen.set(key, pair.key as Node);
        this.#walk(pair.value, [...path, String(key)], anchors);
      }
    }
  }

  #duplicate(
    path: readonly string[],
    key: string,
    node: unknown,
    first: Node,
  ): never {
    const [top, card, ...inCard] = path;
    let where: Where = { field: fieldPath(path) || key, node };
    let expected = "each key once in a mapping";
    if (top === "models" && card === undefined) {
      where = { card: key, node };
      expected = "each card name once";
    } else if (top === "models") {
      where = { card, field: fieldPath(inCard) || key, node };
      expected = ONCE_IN.get(inCard.join()) ?? expected;
    }
    const line = this.lineOf(first);
    this.fail(
      where,
      `duplicate key '${key}' (expected ${expected}; the first is on line ${line})`,
    );
  }

  #yamlProblem(text: string, problem: YAMLError): CatalogueError {
    // An error found at the very end points at the last line that has text.
    const offset = Math.max(0, Math.min(problem.pos[0], text.trimEnd().length));
    const detail = problem.code === "MULTIPLE_DOCS"
      ? "invalid YAML: a second document starts here (expected one document)"
      : `invalid YAML: ${problem.message}`;
    return new CatalogueError(this.file, detail, {
      ...locate(this.contents, offset),
      line: this.#lines.linePos(offset).line,
      cause: problem,
    });
  }
}

/** A value of the catalogue, read through aliases, and where messages point. */
export class Field {
  /** `node`: the value as written (an alias is followed when read); `key`: the key it is written under. */
  constructor(
    readonly ctx: Context,
    readonly node: unknown,
    readonly where: Where,
    readonly key?: unknown,
  ) {}

  get value(): unknown {
    return this.ctx.deref(this.where, this.node);
  }

  get scalar(): unknown {
    const value = this.value;
    return isScalar(value) ? value.value : undefined;
  }

  fail(detail: string, node: unknown = this.where.node): never {
    this.ctx.fail({ ...this.where, node }, detail);
  }

  /** A problem with the key `field` of this mapping, such as a missing one. */
  failAt(field: string, detail: string, node = this.where.node): never {
    this.ctx.fail({ ...this.where, field, node }, detail);
  }

  expected(what: string, suffix = ""): never {
    this.fail(`expected ${what}, got ${describe(this.value)}${suffix}`);
  }

  /** For JSON text; npm:yaml's `toJS` would walk the whole document for each alias. */
  plain(): unknown {
    let budget = MAX_PLAIN_NODES;
    // Depth too: an alias inside itself would otherwise reach the stack's
    // end before the item count, on a thread with a smaller stack.
    const plain = (node: unknown, depth = 0): unknown => {
      if (--budget < 0 || depth > MAX_PLAIN_DEPTH) {
        this.fail(
          `value too large once its aliases are followed (expected at most ${MAX_PLAIN_NODES} items, ${MAX_PLAIN_DEPTH} levels deep)`,
        );
      }
      const value = this.ctx.deref(this.where, node);
      if (isSeq(value)) {
        return value.items.map((item) => plain(item, depth + 1));
      }
      if (!isMap(value)) return (isScalar(value) ? value.value : null) ?? null;
      // No prototype: a key `__proto__` stays a key.
      const out: Record<string, unknown> = Object.create(null);
      for (const pair of value.items) {
        const key = plain(pair.key, depth + 1);
        const name = key !== null && typeof key === "object"
          ? JSON.stringify(key)
          : String(key ?? "");
        out[name] = plain(pair.value, depth + 1);
      }
      return out;
    };
    return plain(this.value);
  }

  /** A list's items, as `field[i]`. */
  items(): Field[] {
    return (this.value as YAMLSeq).items.map((item, i) => {
      const field = `${this.where.field}[${i}]`;
      return new Field(this.ctx, item, { ...this.where, field, node: item });
    });
  }

  /** A mapping's entries by key text, as `field.key`; each key is checked when its turn comes. */
  *entries(): Generator<[string, Field]> {
    for (const pair of (this.value as YAMLMap).items) {
      const at: Field = new Field(this.ctx, pair.key, {
        ...this.where,
        node: pair.key,
      });
      const key = at.scalar;
      if (typeof key !== "string") at.expected("a string key");
      const field = this.where.field === undefined
        ? key
        : `${this.where.field}.${key}`;
      const where = { ...this.where, field, node: pair.value ?? pair.key };
      yield [key, new Field(this.ctx, pair.value, where, pair.key)];
    }
  }
}

/** For "got ..." in messages. */
export function describe(node: unknown): string {
  if (isMap(node)) return "a mapping";
  if (isSeq(node)) return "a list";
  if (!isScalar(node)) return "nothing";
  const value = node.value;
  if (value === null || value === undefined) return "null";
  return typeof value === "string" ? `'${clip(value)}'` : String(value);
}

export function clip(text: string): string {
  const escaped = JSON.stringify(text).slice(1, -1);
  return escaped.length > 60 ? `${escaped.slice(0, 57)}...` : escaped;
}

/** `args.limit-mm-per-prompt`, `command[0]`. */
function fieldPath(parts: readonly string[]): string {
  const dotted = parts.map((p, i) =>
    i === 0 || p.startsWith("[") ? p : `.${p}`
  );
  return dotted.join("");
}

/** The card and field a YAML syntax problem lies in. */
function locate(contents: unknown, offset: number): Where {
  const path: unknown[] = [];
  let node = contents;
  while (isMap(node) && path.length < 3) {
    // A problem found where a key starts belongs to what came before.
    const pair = node.items.find(({ key, value }) => {
      const start = (key as Node | null)?.range?.[0] ?? Infinity;
      const end = ((value ?? key) as Node | null)?.range?.[2] ?? -Infinity;
      return start < offset && offset < end;
    });
    if (pair === undefined) break;
    path.push(isScalar(pair.key) ? pair.key.value : undefined);
    node = pair.value;
  }
  const [top, card, field] = path.map((key) =>
    typeof key === "string" || typeof key === "number" ? String(key) : undefined
  );
  if (top !== "models") return { field: top };
  return path.length === 1 ? { field: "models" } : { card, field };
}
