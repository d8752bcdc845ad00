/**
 * `${NAME}` in a card's `executable`, `command`, `args` values and `env`
 * values, replaced from the launcher's environment at start-up; `$${` is a
 * literal `${`.
 *
 * @module
 */
import type { ModelCard } from "./model_card.ts";

/** Where one expandable value of a card is written. */
export interface ValueSite {
  /** The field as messages name it: `command[0]`, `args.node-rank`, `env.RAY_ADDRESS`. */
  readonly field: string;
  /** The 1-based line. */
  readonly line: number;
}

/** The sites of a card's expandable values, parallel to its fields. */
export interface CardSites {
  /** The site of `executable`. */
  readonly executable?: ValueSite;
  /** One per `command` item. */
  readonly command: readonly ValueSite[];
  /** One per `args` item; `undefined` for a flag name (never expanded). */
  readonly args: readonly (ValueSite | undefined)[];
  /** One per `env` variable. */
  readonly env: Readonly<Record<string, ValueSite>>;
}

/**
 * A requested card refers to a variable the launcher's environment does not
 * set; the one-line message names file, card, field, line and variable.
 *
 * @example
 * ```ts ignore
 * const error = new UnsetVariableError("cat.yaml", "deepseek-v3-2node", { field: "args.node-rank", line: 9 }, "NODE_RANK");
 * console.log(error.message);
 * // Cannot expand catalogue cat.yaml: card 'deepseek-v3-2node', field 'args.node-rank' (line 9): ${NODE_RANK} is not set ...
 * ```
 */
export class UnsetVariableError extends Error {
  /** The catalogue file. */
  readonly file: string;
  /** The card. */
  readonly card: string;
  /** The field holding the reference. */
  readonly field: string;
  /** The 1-based line. */
  readonly line: number;
  /** The variable that is not set. */
  readonly variable: string;

  /**
   * Creates the error.
   *
   * @param file The catalogue file.
   * @param card The card's catalogue name.
   * @param site The field and line of the value.
   * @param variable The variable that is not set.
   */
  constructor(file: string, card: string, site: ValueSite, variable: string) {
    super(
      `Cannot expand catalogue ${file}: card '${card}', field '${site.field}' (line ${site.line}): \${${variable}} is not set (expected ${variable} in the launcher's environment; write $\${ for a literal \${)`,
    );
    this.name = "UnsetVariableError";
    this.file = file;
    this.card = card;
    this.field = site.field;
    this.line = site.line;
    this.variable = variable;
  }
}

const OPENER = /\$\$?\{/g;
const REFERENCE = /[A-Za-z_][A-Za-z0-9_]*\}/y;

/** A lone `$`, or `$$` not before `{`, stays; `bad` is a `${` not followed by a name and `}`. */
function scan(
  text: string,
  lookup: (name: string) => string,
): { text: string } | { bad: string } {
  let out = "";
  let from = 0;
  OPENER.lastIndex = 0;
  for (let m = OPENER.exec(text); m !== null; m = OPENER.exec(text)) {
    out += text.slice(from, m.index);
    if (m[0] === "$${") {
      out += "${";
      from = OPENER.lastIndex;
      continue;
    }
    REFERENCE.lastIndex = OPENER.lastIndex;
    const ref = REFERENCE.exec(text);
    if (ref === null) {
      return { bad: text.slice(m.index, m.index + 24) };
    }
    out += lookup(ref[0].slice(0, -1));
    from = OPENER.lastIndex = REFERENCE.lastIndex;
  }
  return { text: out + text.slice(from) };
}

/** Checked at load time, so a typo fails even in a card nobody requests. */
export function referenceProblem(text: string): string | undefined {
  if (!text.includes("${")) return undefined;
  const result = scan(text, () => "");
  return "bad" in result
    ? `bad reference '${result.bad}' (expected \${NAME} with a name of letters, digits and _, or $\${ for a literal \${)`
    : undefined;
}

/** A card with nothing to expand is returned as it is. */
export function expandCard(
  card: ModelCard,
  env: Readonly<Record<string, string | undefined>>,
  file: string,
  sites: CardSites,
): ModelCard {
  let changed = false;
  function expand(value: string, site: ValueSite | undefined): string {
    if (site === undefined || !value.includes("${")) return value;
    const result = scan(value, (name) => {
      const found = env[name];
      if (found === undefined) {
        throw new UnsetVariableError(file, card.name, site, name);
      }
      return found;
    });
    // The reader refuses bad references, so this only guards hand-made sites.
    if ("bad" in result) return value;
    changed ||= result.text !== value;
    return result.text;
  }
  const out: { -readonly [K in keyof ModelCard]: ModelCard[K] } = { ...card };
  if (card.executable !== undefined) {
    out.executable = expand(card.executable, sites.executable);
  }
  if (card.command !== undefined) {
    out.command = Object.freeze(
      card.command.map((item, i) => expand(item, sites.command[i])),
    );
  }
  out.args = Object.freeze(
    card.args.map((item, i) => expand(item, sites.args[i])),
  );
  out.env = Object.freeze(
    Object.fromEntries(
      Object.entries(card.env).map((
        [name, value],
      ) => [name, expand(value, sites.env[name])]),
    ),
  );
  return changed ? Object.freeze(out) : card;
}
