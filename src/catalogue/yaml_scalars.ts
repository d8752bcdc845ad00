/**
 * Scalars for the catalogue subset reader (`yaml_subset.ts`): plain ones
 * resolved by the YAML 1.2 core schema as npm:yaml resolves them, quoted ones
 * on one line; anything else leaves the subset ({@linkcode decline}).
 *
 * @module
 */

/** Thrown inside the reader when the text leaves the subset. */
export const DECLINED: Error = new Error("outside the catalogue subset");

/** Leaves the subset: the reader returns `undefined` and npm:yaml reads the text. */
export function decline(): never {
  throw DECLINED;
}

/** YAML 1.2 core schema numbers, every form npm:yaml resolves to a number. */
const CORE_NUMBER = new RegExp(
  [
    /0o[0-7]+/,
    /[-+]?[0-9]+/,
    /0x[0-9a-fA-F]+/,
    /[-+]?\.(?:inf|Inf|INF)|\.nan|\.NaN|\.NAN/,
    /[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+/,
    /[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)/,
  ].map((form) => `^(?:${form.source})$`).join("|"),
);
/** The numbers read here: plain decimals that `Number` reads exactly as npm:yaml does. */
const DECIMAL = /^-?(?:0|[1-9][0-9]{0,14})(?:\.[0-9]{1,15})?$/;
const ESCAPES: Record<string, string> = {
  "0": "\0",
  b: "\b",
  t: "\t",
  n: "\n",
  f: "\f",
  r: "\r",
  '"': '"',
  "/": "/",
  "\\": "\\",
};

/** A plain scalar's resolved value: null, boolean, number or string. */
export function resolvePlain(text: string): unknown {
  switch (text) {
    case "~":
    case "null":
    case "Null":
    case "NULL":
      return null;
    case "true":
    case "True":
    case "TRUE":
      return true;
    case "false":
    case "False":
    case "FALSE":
      return false;
  }
  // Most scalars are words: only these can start a core schema number.
  if (!"0123456789-+.".includes(text[0]!) || !CORE_NUMBER.test(text)) {
    return text;
  }
  if (!DECIMAL.test(text) || /^-0(?:\.0*)?$/.test(text)) decline();
  return Number(text);
}

/**
 * A single- or double-quoted scalar that ends on its line (`lineEnd`), from
 * its opening quote at `at`; `end` is just past the closing quote. Double
 * quotes take the escapes `\0 \b \t \n \f \r \" \/ \\ \xXX \uXXXX`; any
 * other escape, or a scalar that goes on to the next line, declines.
 */
export function readQuoted(
  text: string,
  at: number,
  lineEnd: number,
): { value: string; end: number } {
  const quote = text[at];
  let out = "";
  let i = at + 1;
  while (true) {
    if (i >= lineEnd) decline();
    const ch = text[i]!;
    if (ch === quote) {
      if (quote === "'" && text[i + 1] === "'") {
        out += "'";
        i += 2;
        continue;
      }
      return { value: out, end: i + 1 };
    }
    if (ch === "\\" && quote === '"') {
      const escape = text[i + 1] ?? "";
      const simple = ESCAPES[escape];
      if (simple !== undefined) {
        out += simple;
        i += 2;
        continue;
      }
      const digits = escape === "x" ? 2 : escape === "u" ? 4 : 0;
      const hex = text.slice(i + 2, i + 2 + digits);
      if (
        digits === 0 || !/^[0-9a-fA-F]+$/.test(hex) || hex.length < digits
      ) decline();
      const code = parseInt(hex, 16);
      if (code >= 0xd800 && code <= 0xdfff) decline();
      out += String.fromCharCode(code);
      i += 2 + digits;
      continue;
    }
    out += ch;
    i++;
  }
}
