/**
 * The catalogue subset reader: the plain YAML that catalogues are written in,
 * read in one pass into the card reader's tree. npm:yaml reads a 32-card
 * catalogue in 15–30 ms of a cold process, most of a `--dry-run`'s own time.
 *
 * It reads a block mapping at the root, and within it block mappings and
 * lists (a list may sit at its key's indentation, or open on a `- key:` line),
 * flow mappings and lists (across lines, with a trailing comma), plain
 * scalars on one line, single- and double-quoted scalars on one line,
 * comments and blank lines. Scalars resolve by the YAML 1.2 core schema, as
 * npm:yaml resolves them.
 *
 * It declines (returns `undefined`) everything else, and npm:yaml reads it:
 * anchors, aliases, tags, block scalars, plain or quoted scalars over several
 * lines, directives and document markers, explicit keys, tabs, carriage
 * returns and control characters, keys that repeat or are not strings,
 * numbers not written in plain decimal, and any text that is not valid YAML,
 * so that npm:yaml words every syntax error. A test holds the two readers to
 * the same tree on every catalogue in the repository and on thousands of
 * mutations of them (`tests/catalogue/yaml_subset_test.ts`).
 *
 * @module
 */
import {
  plainData,
  type YamlMap,
  type YamlNode,
  type YamlPair,
  type YamlScalar,
  type YamlSeq,
} from "./yaml_tree.ts";
import { decline, DECLINED, readQuoted, resolvePlain } from "./yaml_scalars.ts";

/**
 * Reads a catalogue's text when it is written in the subset.
 *
 * @param text The YAML text.
 * @returns The root mapping, or `undefined` when the text is outside the
 *   subset (or not valid YAML): then npm:yaml must read it.
 *
 * @example
 * ```ts ignore
 * const root = readYamlSubset("models:\n  e5: { verb: embed, hub: intfloat/e5-small-v2 }\n");
 * console.log(root?.pairs[0]?.value?.kind); // map
 * ```
 */
export function readYamlSubset(text: string): YamlMap | undefined {
  if (OUTSIDE.test(text) || MARKER.test(text)) return undefined;
  try {
    return new SubsetReader(text).document();
  } catch (error) {
    if (error === DECLINED) return undefined;
    throw error;
  }
}

/** Tabs, carriage returns, control characters, lone surrogates, line and paragraph separators, byte-order marks. */
// deno-lint-ignore no-control-regex
const OUTSIDE = /[\x00-\x09\x0B-\x1F\x7F-\x9F\u2028\u2029\uD800-\uDFFF\uFEFF]/;

/** A document marker (`---`, `...`) starting a line. */
const MARKER = /^(?:---|\.\.\.)(?:[ \n]|$)/m;

/** Characters that may not start a plain scalar. */
const INDICATORS = "[]{},#&*!|>'\"%@`";
const FLOW_INDICATORS = ",[]{}";

/** A node and the offset just past its text. */
interface Read<T> {
  node: T;
  end: number;
}

/** What ended a plain scalar: `: `, ` #`, the line's end, or a flow indicator. */
type PlainStop = "colon" | "comment" | "eol" | "flow";

class SubsetReader {
  readonly #text: string;
  /** Offset of each line's start. */
  readonly #starts: number[] = [0];
  /** Between block entries: the start of a line. */
  #pos = 0;

  constructor(text: string) {
    this.#text = text;
    for (let i = text.indexOf("\n"); i >= 0; i = text.indexOf("\n", i + 1)) {
      this.#starts.push(i + 1);
    }
  }

  document(): YamlMap {
    if (this.#nextContent() !== 0) decline();
    const at = this.#pos;
    if (!this.#isKeyAt(at)) decline();
    return this.#blockMap(0, at);
  }

  /** The 1-based line of an offset. */
  #line(offset: number): number {
    let low = 0;
    let high = this.#starts.length - 1;
    while (low < high) {
      const mid = (low + high + 1) >> 1;
      if (this.#starts[mid]! <= offset) low = mid;
      else high = mid - 1;
    }
    return low + 1;
  }

  /** The offset of the start of an offset's line. */
  #lineStart(offset: number): number {
    return this.#starts[this.#line(offset) - 1]!;
  }

  #lineEnd(offset: number): number {
    const end = this.#text.indexOf("\n", offset);
    return end < 0 ? this.#text.length : end;
  }

  #scalar(value: unknown, offset: number): YamlScalar {
    return { kind: "scalar", line: this.#line(offset), value };
  }

  /**
   * From a line start, skips blank and comment lines. Returns the indentation
   * of the next line with content (`#pos` at its start), or -1 at the end.
   */
  #nextContent(): number {
    const t = this.#text;
    while (this.#pos < t.length) {
      let i = this.#pos;
      while (t[i] === " ") i++;
      if (i < t.length && t[i] !== "\n" && t[i] !== "#") return i - this.#pos;
      this.#pos = Math.min(this.#lineEnd(i) + 1, t.length);
    }
    return -1;
  }

  /** Whether a block list entry (`- ` or a lone `-`) starts at an offset. */
  #dashAt(at: number): boolean {
    const next = this.#text[at + 1];
    return this.#text[at] === "-" &&
      (next === undefined || next === " " || next === "\n");
  }

  #isKeyAt(at: number): boolean {
    try {
      this.#key(at);
      return true;
    } catch (error) {
      if (error === DECLINED) return false;
      throw error;
    }
  }

  /**
   * A mapping's key: a string, then `:` and a space or the line's end (a
   * block key may also end the text). `end` is the colon.
   */
  #key(at: number, flow = false): Read<YamlScalar> {
    const t = this.#text;
    let value: unknown;
    let end: number;
    if (t[at] === '"' || t[at] === "'") {
      ({ value, end } = this.#quoted(at));
    } else {
      const plain = this.#plain(at, flow);
      if (plain.stop !== "colon") decline();
      value = resolvePlain(plain.text);
      end = plain.colon;
    }
    const after = t[end + 1];
    const spaced = after === " " || after === "\n" ||
      (!flow && after === undefined);
    if (
      typeof value !== "string" || value === "__proto__" ||
      value.length > 1024 || t[end] !== ":" || !spaced ||
      // npm:yaml wants an implicit block key's colon within 1024 characters
      // of where it starts counting (before the key, at the line break):
      // keys that come near are left to it.
      (!flow && end - this.#lineStart(at) >= 1000)
    ) decline();
    return { node: this.#scalar(value, at), end };
  }

  /** A block mapping whose keys sit at `column`; the first key is at `first`. */
  #blockMap(column: number, first: number): YamlMap {
    const pairs: YamlPair[] = [];
    const node: YamlMap = {
      kind: "map",
      line: this.#line(first),
      pairs,
      toJS: () => plainData(node),
    };
    const keys = new Set<string>();
    let at = first;
    while (true) {
      const key = this.#key(at);
      const name = key.node.value as string;
      if (keys.has(name)) decline();
      keys.add(name);
      pairs.push({
        key: key.node,
        value: this.#valueAfter(key.end + 1, column, true),
      });
      const indent = this.#nextContent();
      if (indent < column) return node;
      if (indent > column) decline();
      at = this.#pos + column;
    }
  }

  /** A block list whose dashes sit at `column`; `#pos` is the first dash's line. */
  #blockSeq(column: number): YamlSeq {
    const t = this.#text;
    const items: YamlNode[] = [];
    let at = this.#pos + column;
    const node: YamlSeq = {
      kind: "seq",
      line: this.#line(at),
      items,
      toJS: () => plainData(node),
    };
    while (true) {
      let r = at + 1;
      while (t[r] === " ") r++;
      const inline = r < this.#lineEnd(at) && t[r] !== "#";
      if (inline && this.#isKeyAt(r)) {
        items.push(this.#blockMap(r - this.#lineStart(r), r));
      } else if (inline && this.#dashAt(r)) {
        decline();
      } else {
        items.push(this.#valueAfter(at + 1, column, false));
      }
      const indent = this.#nextContent();
      if (indent !== column) {
        if (indent > column) decline();
        return node;
      }
      at = this.#pos + column;
      // A line without a dash belongs to the mapping this list sits under.
      if (!this.#dashAt(at)) return node;
    }
  }

  /**
   * The value after a key's colon or an entry's dash (`from` is just past
   * it), in a block collection at `column`. Leaves `#pos` at a line start.
   */
  #valueAfter(from: number, column: number, inMap: boolean): YamlNode {
    const t = this.#text;
    let r = from;
    while (t[r] === " ") r++;
    const lineEnd = this.#lineEnd(from);
    if (r >= lineEnd || t[r] === "#") {
      // Nothing on this line: a block below, or an empty value.
      this.#pos = Math.min(lineEnd + 1, t.length);
      const indent = this.#nextContent();
      if (indent > column) return this.#blockNode(indent);
      if (indent === column && inMap && this.#dashAt(this.#pos + column)) {
        return this.#blockSeq(column);
      }
      return this.#scalar(null, from);
    }
    const read = this.#inline(r, column);
    let k = read.end;
    while (t[k] === " ") k++;
    const end = this.#lineEnd(k);
    if (k < end && !(t[k] === "#" && k > read.end)) decline();
    this.#pos = Math.min(end + 1, t.length);
    return read.node;
  }

  /** A block mapping or list on its own lines, indented `indent`. */
  #blockNode(indent: number): YamlNode {
    const at = this.#pos + indent;
    if (this.#dashAt(at)) return this.#blockSeq(indent);
    if (this.#isKeyAt(at)) return this.#blockMap(indent, at);
    return decline();
  }

  /** A value on the line of its key or dash: a flow collection or a scalar. */
  #inline(at: number, column: number): Read<YamlNode> {
    const t = this.#text;
    if (t[at] === "{" || t[at] === "[") return this.#flow(at, column);
    if (t[at] === '"' || t[at] === "'") {
      const { value, end } = this.#quoted(at);
      return { node: this.#scalar(value, at), end };
    }
    const plain = this.#plain(at, false);
    if (plain.stop === "colon") decline();
    return { node: this.#scalar(resolvePlain(plain.text), at), end: plain.end };
  }

  /**
   * A plain scalar on one line. `end` is just past its text (trailing spaces
   * excluded); `colon` is where a `: ` stopped it.
   */
  #plain(
    at: number,
    flow: boolean,
  ): { text: string; end: number; stop: PlainStop; colon: number } {
    const t = this.#text;
    const first = t[at];
    const next = t[at + 1];
    if (
      first === undefined || first === " " || first === "\n" ||
      INDICATORS.includes(first)
    ) decline();
    if (
      "-?:".includes(first) &&
      (next === undefined || next === " " || next === "\n" ||
        (flow && FLOW_INDICATORS.includes(next)))
    ) decline();
    const lineEnd = this.#lineEnd(at);
    let stop: PlainStop = "eol";
    let i = at;
    for (; i < lineEnd; i++) {
      const ch = t[i]!;
      if (ch === ":") {
        const after = t[i + 1];
        if (after === undefined || after === " " || after === "\n") {
          stop = "colon";
          break;
        }
        // `a:b` in a flow collection: npm:yaml's reading is subtle; leave it to it.
        if (flow) decline();
      } else if (ch === "#" && t[i - 1] === " ") {
        stop = "comment";
        break;
      } else if (flow && FLOW_INDICATORS.includes(ch)) {
        stop = "flow";
        break;
      }
    }
    const colon = i;
    while (i > at && t[i - 1] === " ") i--;
    return { text: t.slice(at, i), end: i, stop, colon };
  }

  /** A single- or double-quoted scalar on one line; `end` is just past the closing quote. */
  #quoted(at: number): { value: string; end: number } {
    return readQuoted(this.#text, at, this.#lineEnd(at));
  }

  /** A flow mapping or list, over as many lines as it takes, inside a block collection at `column`. */
  #flow(at: number, column: number, depth = 1): Read<YamlMap | YamlSeq> {
    const t = this.#text;
    const close = t[at] === "{" ? "}" : "]";
    const line = this.#line(at);
    const items: YamlNode[] = [];
    const pairs: YamlPair[] = [];
    const keys = new Set<string>();
    const node: YamlMap | YamlSeq = close === "}"
      ? { kind: "map", line, pairs, toJS: () => plainData(node) }
      : { kind: "seq", line, items, toJS: () => plainData(node) };
    let i = at + 1;
    while (true) {
      i = this.#flowSpace(i, column, depth);
      if (t[i] === close) return { node, end: i + 1 };
      if (close === "]") {
        const item = this.#flowNode(i, column, depth);
        items.push(item.node);
        i = this.#flowSpace(item.end, column, depth);
      } else {
        const key = this.#key(i, true);
        i = this.#flowSpace(key.end + 1, column, depth);
        if (t[i] === "," || t[i] === "}") decline();
        const value = this.#flowNode(i, column, depth);
        const name = key.node.value as string;
        if (keys.has(name)) decline();
        keys.add(name);
        pairs.push({ key: key.node, value: value.node });
        i = this.#flowSpace(value.end, column, depth);
      }
      if (t[i] === ",") i++;
      else if (t[i] !== close) decline();
    }
  }

  /** A value inside a flow collection: a nested one, or a scalar that is not a key. */
  #flowNode(at: number, column: number, depth: number): Read<YamlNode> {
    const t = this.#text;
    if (t[at] === "{" || t[at] === "[") {
      return this.#flow(at, column, depth + 1);
    }
    if (t[at] === '"' || t[at] === "'") {
      const { value, end } = this.#quoted(at);
      if (t[end] === ":") decline();
      return { node: this.#scalar(value, at), end };
    }
    const plain = this.#plain(at, true);
    if (plain.stop === "colon") decline();
    return { node: this.#scalar(resolvePlain(plain.text), at), end: plain.end };
  }

  /**
   * Skips spaces, line breaks and comments inside a flow collection `depth`
   * deep. Each new line's text must be indented past the block collection's
   * `column`; only the outermost collection's closing bracket may sit at it,
   * as npm:yaml requires.
   */
  #flowSpace(from: number, column: number, depth: number): number {
    const t = this.#text;
    let i = from;
    while (true) {
      const ch = t[i];
      if (ch === " ") i++;
      else if (ch === "#") {
        // A comment at a line's start can join the next entry in npm:yaml's
        // reading ("not separated by white space"): only spaced ones are read.
        if (t[i - 1] !== " ") decline();
        i = this.#lineEnd(i);
      } else if (ch === "\n") {
        i++;
        let k = i;
        while (t[k] === " ") k++;
        const first = t[k];
        const indent = k - i;
        if (
          first !== undefined && first !== "\n" && first !== "#" &&
          indent <= column &&
          !(indent === column && depth === 1 &&
            (first === "]" || first === "}"))
        ) decline();
        i = k;
      } else return i;
    }
  }
}
