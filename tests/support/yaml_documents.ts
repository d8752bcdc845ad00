/**
 * A grammar-based generator of YAML documents for the catalogue subset
 * reader's test (tests/catalogue/yaml_subset_test.ts): where seeded mutations
 * of real catalogues change a character or two, these are built from the
 * grammar up, so they reach shapes no catalogue in the repository has. It
 * found the two rules the reader first missed (a comment at a line's start
 * inside a flow mapping, and npm:yaml's 1024-character key limit counted from
 * before the key).
 */
import { random } from "./seeded_random.ts";
import {
  ESCAPES,
  EXOTIC_SCALARS,
  KEYWORDS,
  NUMBERS,
  ODD_PLAINS,
  SAFE_NUMBERS,
  SAFE_ODD_PLAINS,
  SAFE_QUOTED,
  UNICODE_SPACES,
  WORDS,
} from "./yaml_vocabulary.ts";

/**
 * Random YAML documents shaped like catalogues and around them: block
 * mappings and lists at regular and wrong indentations, flow collections
 * across lines, scalars of every core-schema form, quotes and escapes,
 * comments everywhere, and now and then what the subset must decline
 * (anchors, tags, block scalars, document markers, long keys). Each document
 * has a chaos level: clean ones are mostly read by the subset, noisy ones
 * probe its declines.
 */
class YamlDocuments {
  r: () => number;
  // per-document "style" knobs so some documents are clean and some noisy
  noise: number;
  flowBreak: number;
  exotic: number;
  chaos: number;
  constructor(seed: number) {
    this.r = random(seed);
    this.chaos = [0, 0.05, 0.15, 0.4, 1][Math.floor(this.r() * 5)]!;
    this.noise = this.r() * 0.25;
    this.flowBreak = this.r() * 0.5;
    this.exotic = this.r() < 0.08 ? 0.03 : 0;
  }
  p(x: number) {
    return this.r() < x;
  }
  /** A weird choice, scaled by the document's chaos. */
  w(x: number) {
    return this.r() < x * this.chaos;
  }
  int(n: number) {
    return Math.floor(this.r() * n);
  }
  pick<T>(a: readonly T[]): T {
    return a[this.int(a.length)]!;
  }
  sp(n: number) {
    return " ".repeat(Math.max(0, n));
  }

  word(): string {
    return this.pick(WORDS);
  }

  number(): string {
    return this.pick(NUMBERS);
  }

  keywordish(): string {
    return this.pick(KEYWORDS);
  }

  oddPlain(): string {
    return this.pick(ODD_PLAINS);
  }

  escapeSeq(): string {
    return this.pick(ESCAPES);
  }

  quoted(): string {
    if (this.p(0.4)) {
      const parts: string[] = [];
      for (let i = this.int(4); i > 0; i--) {
        parts.push(
          this.pick([
            this.word(),
            "''",
            " ",
            "#",
            ": ",
            "\\",
            '"',
            "x y",
            this.number(),
            ", ",
            "]",
            "}",
          ]),
        );
      }
      return `'${parts.join("")}'`;
    }
    const parts: string[] = [];
    for (let i = this.int(4); i > 0; i--) {
      parts.push(
        this.p(0.5) ? this.escapeSeq() : this.pick([
          this.word(),
          " ",
          "#",
          ": ",
          "'",
          "x y",
          this.number(),
          ", ",
          "]",
          "}",
        ]),
      );
    }
    return `"${parts.join("")}"`;
  }

  safeScalar(): string {
    const c = this.r();
    if (c < 0.5) return this.word();
    if (c < 0.6) return this.pick(SAFE_NUMBERS);
    if (c < 0.7) {
      return this.pick(["true", "false", "null", "~", "Null", "TRUE"]);
    }
    if (c < 0.8) return this.pick(SAFE_ODD_PLAINS);
    return this.pick(SAFE_QUOTED);
  }

  scalar(): string {
    if (!this.w(1)) return this.safeScalar();
    const c = this.r();
    if (c < 0.3) return this.word();
    if (c < 0.45) return this.number();
    if (c < 0.55) return this.keywordish();
    if (c < 0.7) return this.oddPlain();
    if (c < 0.88) return this.quoted();
    if (c < 0.92) return `${this.word()} ${this.word()}`;
    if (this.exotic > 0 || this.p(0.3)) {
      return this.pick(EXOTIC_SCALARS);
    }
    return this.word();
  }

  key(): string {
    if (!this.w(1)) {
      return this.p(0.9)
        ? this.word()
        : this.pick(["'q k'", '"dq"', "a b", "x-y", "x.y"]);
    }
    const c = this.r();
    let k: string;
    if (c < 0.6) k = this.word();
    else if (c < 0.7) k = this.quoted();
    else if (c < 0.78) k = this.pick([this.number(), this.keywordish()]);
    else if (c < 0.82) {
      k = this.pick([
        "__proto__",
        "'__proto__'",
        '"__proto__"',
        "constructor",
        "toString",
        "hasOwnProperty",
        "__defineGetter__",
      ]);
    } else if (c < 0.9) k = this.oddPlain();
    else if (c < 0.93) {
      k = this.pick([
        "",
        "? a",
        "[a]",
        "{a: 1}",
        "[]",
        "{}",
        "&a k",
        "*a",
        "!!str k",
        "!k k",
      ]);
    } else k = `${this.word()} ${this.word()}`;
    if (this.w(0.1)) k += this.sp(1 + this.int(2)); // spaces before colon
    if (this.w(0.01)) k = this.longKey();
    return k;
  }

  // Keys used in a mapping, with occasional duplicates.
  mapKeys(n: number): string[] {
    const keys: string[] = [];
    for (let i = 0; i < n; i++) {
      if (keys.length && this.w(0.05)) keys.push(this.pick(keys));
      else {
        let k = this.key();
        for (let t = 0; t < 5 && keys.includes(k) && !this.w(0.3); t++) {
          k = this.p(0.5) ? this.key() : this.word() + this.int(100);
        }
        keys.push(k);
      }
    }
    return keys;
  }

  longKey(): string {
    const n = 1000 + this.int(40);
    switch (this.int(6)) {
      case 0:
        return "a" + this.sp(n - 1);
      case 1:
        return "a".repeat(1020 + this.int(8)) + this.sp(this.int(6));
      case 2:
        return '"' + "\\x41".repeat(Math.floor(n / 4)) + '"';
      case 3:
        return "'" + "''".repeat(Math.floor(n / 2)) + "'";
      case 4:
        return '"' + "\\u00e9".repeat(Math.floor(n / 6)) + '"';
      default:
        return "😀".repeat(505 + this.int(15));
    }
  }

  uspace(): string {
    return this.pick(UNICODE_SPACES);
  }

  trail(): string {
    // what may follow a value on its line
    if (!this.w(1)) return this.p(0.8) ? "" : " # " + this.word();
    const c = this.r();
    if (c < 0.75) return "";
    if (c < 0.85) return " # " + this.word();
    if (c < 0.9) return this.sp(1 + this.int(3));
    if (c < 0.93) return "#c";
    if (c < 0.96) return this.sp(1 + this.int(2)) + "#";
    return this.pick(["  #: x", " # - a", " #{", ",", " ]", " x", ": y"]);
  }

  // lines of noise between entries
  between(indent: number): string {
    let s = "";
    while (this.p(this.noise)) {
      const c = this.r();
      if (c < 0.35) s += "\n";
      else if (c < 0.55) s += this.sp(this.int(8)) + "\n";
      else {s += this.sp(
          this.pick([0, indent, indent + 1, indent - 1, this.int(10)]),
        ) + "# " + this.word() + "\n";}
    }
    return s;
  }

  // A continuation-line indentation inside a flow collection.
  flowIndent(col: number): number {
    if (!this.w(1)) return col + (this.p(0.1) ? 0 : 1 + this.int(4));
    return Math.max(
      0,
      this.pick([col - 1, col, col + 1, col + 2, col + 4, this.int(8), 0]),
    );
  }

  flowSep(col: number): string {
    if (!this.p(this.flowBreak)) return this.pick(["", " ", " ", "  "]);
    let s = this.pick(["", " "]);
    if (this.p(0.2)) s += (s === "" ? " " : "") + "# c";
    s += "\n";
    if (this.p(0.1)) {
      s += this.sp(this.int(6)) + (this.p(0.5) ? "# z" : "") + "\n";
    }
    return s + this.sp(this.flowIndent(col));
  }

  flowScalar(): string {
    if (!this.w(1)) {
      const v = this.safeScalar();
      return /[,\[\]{}]|:/.test(v) && !/^['"]/.test(v) ? this.word() : v;
    }
    const c = this.r();
    if (c < 0.4) return this.word();
    if (c < 0.55) return this.number();
    if (c < 0.62) return this.keywordish();
    if (c < 0.77) return this.oddPlain();
    if (c < 0.95) return this.quoted();
    return `${this.word()} ${this.word()}`;
  }

  flowItem(depth: number, col: number): string {
    if (depth < 4 && this.p(0.15)) return this.flow(depth + 1, col);
    if (this.w(0.05)) {
      return this.pick([
        "",
        "a: b",
        "a:b",
        '"a":b',
        "? a",
        "&a x",
        "*a",
        "!t x",
        "- x",
        "a:",
      ]);
    }
    return this.flowScalar();
  }

  flow(depth: number, col: number): string {
    const isMap = this.p(0.5);
    const n = this.p(0.1) ? 0 : 1 + this.int(4);
    let s = isMap ? "{" : "[";
    const keys = isMap ? this.mapKeys(n) : [];
    for (let i = 0; i < n; i++) {
      s += this.flowSep(col);
      if (isMap) {
        let k = keys[i]!;
        if (k.startsWith("?") || k === "") k = this.word();
        s += k;
        const c = this.w(1) ? this.r() : 0;
        if (c < 0.85) {
          s += this.p(0.1)
            ? ":" + this.flowSep(col)
            : ": " + this.flowSep(col).trimStart();
        } else if (c < 0.9) s += ":";
        else if (c < 0.93) s += ":" + this.flowSep(col);
        else if (c < 0.96) {
          s += ":"; // adjacent
        } else {
          s += " : ";
        }
        if (this.w(0.05)) {
          // key without value
          s = s.replace(/:\s*$/, "");
        } else s += this.flowItem(depth, col);
      } else s += this.flowItem(depth, col);
      s += this.flowSep(col);
      if (i < n - 1) s += !this.w(0.05) ? "," : this.pick(["", ",,", " ,"]);
      else if (this.p(0.25)) s += ",";
    }
    if (n === 0 && this.p(0.3)) s += this.flowSep(col);
    if (this.w(0.03)) s += this.pick([",", " ,", ",,"]);
    s += !this.w(0.01) ? (isMap ? "}" : "]") : (isMap ? "]" : "}");
    return s;
  }

  // A value after "key:" at `col`. Returns text starting right after the colon,
  // ending with "\n".
  mapValue(col: number, depth: number): string {
    const c = this.r();
    if (depth < 4 && c < 0.2) {
      // nested block map
      const delta = this.pick([1, 2, 2, 2, 3, 4, 0]);
      return this.trail() + "\n" + this.between(col) +
        this.blockMap(col + delta, depth + 1);
    }
    if (depth < 4 && c < 0.32) {
      const delta = this.pick([0, 0, 2, 2, 1, 3, 4]);
      return this.trail() + "\n" + this.between(col) +
        this.blockSeq(col + delta, depth + 1);
    }
    if (c < 0.55) {
      return (this.w(0.1) ? "" : this.pick([" ", " ", "  "])) +
        this.flow(1, col) + this.trail() + "\n";
    }
    if (c < 0.6) return this.trail() + "\n"; // empty
    if (c < 0.62 && this.w(1)) {
      // multi-line plain / quoted
      return " " +
        this.pick([
          "x\n" + this.sp(col + 1) + "y",
          '"x\n' + this.sp(col + 1) + 'y"',
          "'x\n" + this.sp(col) + "y'",
          "x\n" + this.sp(col) + "y",
        ]) + "\n";
    }
    if (c < 0.63 && this.exotic) {
      return " " +
        this.pick([
          "|\n" + this.sp(col + 2) + "text",
          ">-\n" + this.sp(col + 2) + "a\n" + this.sp(col + 2) + "b",
          "&a\n" + this.sp(col + 2) + "k: v",
          "!!map\n" + this.sp(col + 2) + "k: v",
        ]) + "\n";
    }
    return (this.w(0.1) ? "" : this.pick([" ", " ", " ", "  "])) +
      this.scalar() + this.trail() + "\n";
  }

  blockMap(col: number, depth: number): string {
    const n = 1 + this.int(depth === 0 ? 5 : 3);
    const keys = this.mapKeys(n);
    let s = "";
    for (let i = 0; i < n; i++) {
      let ind = col;
      if (i > 0 && this.w(0.05)) ind += this.pick([-1, 1, -2, 2]); // wrong dedent
      s += this.sp(ind) + keys[i] + ":" + this.mapValue(ind, depth);
      s += this.between(col);
    }
    return s;
  }

  seqItem(col: number, depth: number): string {
    // text after "-" (dash at col), ending in newline
    const c = this.r();
    if (depth < 5 && c < 0.25) {
      // compact mapping: - k: v\n   k2: v
      const gap = this.pick([1, 1, 1, 2, 3]);
      const inner = col + 1 + gap;
      const n = 1 + this.int(3);
      const keys = this.mapKeys(n);
      let s = this.sp(gap) + keys[0] + ":" + this.mapValue(inner, depth + 1);
      for (let i = 1; i < n; i++) {
        let ind = inner;
        if (this.w(0.08)) ind += this.pick([-1, 1, -2]);
        s += this.between(inner) + this.sp(ind) + keys[i] + ":" +
          this.mapValue(ind, depth + 1);
      }
      return s;
    }
    if (depth < 5 && c < 0.3) {
      // block node on following lines
      const delta = this.pick([1, 2, 2, 3, 0]);
      return this.trail() + "\n" +
        (this.p(0.7)
          ? this.blockMap(col + delta, depth + 1)
          : this.blockSeq(col + delta, depth + 1));
    }
    if (c < 0.33 && this.w(1)) return " - " + this.scalar() + "\n"; // nested compact seq
    if (c < 0.5) return " " + this.flow(1, col) + this.trail() + "\n";
    if (c < 0.55) return this.trail() + "\n"; // empty item
    return this.pick([" ", " ", "  "]) + this.scalar() + this.trail() + "\n";
  }

  blockSeq(col: number, depth: number): string {
    const n = 1 + this.int(3);
    let s = "";
    for (let i = 0; i < n; i++) {
      let ind = col;
      if (i > 0 && this.w(0.05)) ind += this.pick([-1, 1]);
      s += this.sp(ind) + "-" + this.seqItem(ind, depth);
      s += this.between(col);
    }
    return s;
  }

  document(): string {
    let s = this.between(0) + this.blockMap(0, 0);
    const c = this.r();
    if (c < 0.1) s = s.replace(/\n$/, "");
    else if (c < 0.15) s += this.sp(1 + this.int(4));
    else if (c < 0.18) s += "\n\n";
    else if (c < 0.2) s += "# end";
    if (this.w(0.05)) {
      const spaces = [...s.matchAll(/ /g)];
      if (spaces.length) {
        const at = this.pick(spaces).index!;
        s = s.slice(0, at) + this.uspace() + s.slice(at + 1);
      }
    }
    if (this.w(0.03)) {
      const at = this.int(s.length + 1);
      s = s.slice(0, at) + this.uspace() + s.slice(at);
    }
    if (this.exotic && this.p(0.3)) {
      s = this.pick([
        "---\n" + s,
        s + "...\n",
        s + "---\nb: 1\n",
        "%YAML 1.2\n---\n" + s,
        "--- # c\n" + s,
      ]);
    }
    return s;
  }
}

/**
 * The `index`-th generated document of `seed`: the same text every time.
 *
 * @example
 * ```ts ignore
 * const text = yamlDocument(1, 0);
 * ```
 */
export function yamlDocument(seed: number, index: number): string {
  return new YamlDocuments(seed * 1000003 + index).document();
}
