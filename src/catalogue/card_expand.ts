/**
 * Per-node values in cards: `${NAME}` in a card's `executable`, `command`,
 * `args` values and `env` values is replaced from the launcher's environment at
 * start-up; `$${` stays a literal `${`. Pure: the environment is handed in.
 *
 * @module
 */
import type { ModelCard } from "./model_card.ts";

/** Where one expandable value of a card is written, for the error naming it. */
export interface ValueSite {
  /** The field as messages name it: `executable`, `command[0]`, `args.node-rank`, `env.RAY_ADDRESS`. */
  readonly field: string;
  /** The 1-based line of the value in the catalogue file. */
  readonly line: number;
}

/** The sites of a card's expandable values, parallel to the card's own fields. */
export interface CardSites {
  /** The site of `executable`, when the card has one. */
  readonly executable?: ValueSite;
  /** One site per `command` item. */
  readonly command: readonly ValueSite[];
  /** One entry per `args` item: a site for a value, `undefined` for a flag name (never expanded). */
  readonly args: readonly (ValueSite | undefined)[];
  /** One site per `env` variable (the value is expanded, never the name). */
  readonly env: Readonly<Record<string, ValueSite>>;
}

/**
 * Thrown when a card of a requested model refers to a variable the launcher's
 * environment does not set. The message is one line naming the file, card,
 * field, line and variable.
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
  /** The card's catalogue name. */
  readonly card: string;
  /** The field holding the reference. */
  readonly field: string;
  /** The 1-based line of that field's value. */
  readonly line: number;
  /** The variable that is not set. */
  readonly variable: string;

  /**
   * Builds the one-line message from its parts.
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

/**
 * Replaces every `${NAME}` in `text` with `lookup(NAME)` and every `$${` with
 * `${`. A lone `$`, or `$$` not followed by `{`, stays as it is.
 *
 * @returns The expanded text, or the offending reference when `${` is not
 *   followed by a name and `}`.
 */
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

/**
 * What is wrong with the references in a card value, for the catalogue reader
 * to report at load time; `undefined` when every `${` opens `${NAME}`.
 *
 * @param text A card value as written.
 * @returns The problem, phrased as "bad reference ... (expected ...)".
 */
export function referenceProblem(text: string): string | undefined {
  if (!text.includes("${")) return undefined;
  const result = scan(text, () => "");
  return "bad" in result
    ? `bad reference '${result.bad}' (expected \${NAME} with a name of letters, digits and _, or $\${ for a literal \${)`
    : undefined;
}

/**
 * The card with every `${NAME}` in its `executable`, `command`, `args` values
 * and `env` values replaced from `env`, and `$${` turned into `${`. A card with
 * nothing to expand is returned as it is.
 *
 * @param card A card as the catalogue holds it.
 * @param env The launcher's environment.
 * @param file The catalogue file, named in the error.
 * @param sites Where the card's values are written.
 * @returns The expanded card, frozen.
 * @throws {UnsetVariableError} At the first reference to a variable `env` lacks.
 */
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
