/**
 * What a PromQL expression selects: its metric names and, per selector, the
 * label names it matches on. A lexer, not a parser: promtool checks that the
 * same expressions parse (tests/deploy/monitoring_test.ts).
 */

/** One `name{label="v", …}` in an expression; `name` empty for `{…}` alone. */
export interface Selector {
  name: string;
  labels: string[];
}

const KEYWORDS = new Set([
  "by",
  "without",
  "on",
  "ignoring",
  "group_left",
  "group_right",
  "bool",
  "and",
  "or",
  "unless",
  "offset",
  "inf",
  "nan",
]);
const STRING = /"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g;
const GROUPING =
  /\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g;
// Not after a letter, digit, `.`, `:` or `$` (a duration's unit, a number's
// exponent, a Grafana variable), not before `(` (a function or aggregation).
const IDENTIFIER = /(?<![\w.:$])[a-zA-Z_:][\w:]*(?![\w:]*\s*\()/g;
const SELECTOR = /([a-zA-Z_:][\w:]*)?\s*\{([^}]*)\}/g;

/** The expression with its string literals emptied and its comments gone. */
function bare(expr: string): string {
  return expr.replace(STRING, '""').replace(/#[^\n]*/g, " ");
}

/**
 * The metric names `expr` selects.
 *
 * @example
 * ```ts ignore
 * metricNames('sum by (model) (rate(x_total{a="b"}[5m])) > 0'); // Set {"x_total"}
 * ```
 */
export function metricNames(expr: string): Set<string> {
  const text = bare(expr);
  if (/__name__/.test(text)) {
    throw new Error(
      `Cannot read metric names from ${expr}: it matches __name__`,
    );
  }
  const plain = text.replace(/\{[^}]*\}/g, " ").replace(/\[[^\]]*\]/g, " ")
    .replace(GROUPING, " ");
  return new Set(
    [...plain.matchAll(IDENTIFIER)].map((m) => m[0])
      .filter((name) => !KEYWORDS.has(name)),
  );
}

/** Each `name{…}` of `expr` with the label names it matches on. */
export function selectors(expr: string): Selector[] {
  return [...bare(expr).matchAll(SELECTOR)].map((m) => ({
    name: m[1] ?? "",
    labels: m[2]!.split(",").map((matcher) => matcher.split(/[=!]/)[0]!.trim())
      .filter(Boolean),
  }));
}
