/**
 * `${NAME}` in a card's `executable`, `command`, `args` values and `env`
 * values, replaced from the launcher's environment at start-up; `$${` is a
 * literal `${`.
 *
 * @module
 */
import type { ModelCard } from "./model_card.ts";

/** Where one expandable value of a card is written: `command[0]`, `args.node-rank`, `env.RAY_ADDRESS`, and its line. */
export interface ValueSite {
  readonly field: string;
  readonly line: number;
}

/** The sites of a card's expandable values, parallel to its fields; `undefined` for a flag name in `args` (never expanded). */
export interface CardSites {
  readonly executable?: ValueSite;
  readonly command: readonly ValueSite[];
  readonly args: readonly (ValueSite | undefined)[];
  readonly env: Readonly<Record<string, ValueSite>>;
}

/** A requested card refers to a variable the launcher's environment does not set. */
export class UnsetVariableError extends Error {
  readonly file: string;
  readonly card: string;
  readonly field: string;
  readonly line: number;
  readonly variable: string;

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

const REFERENCE = /\$\$\{|\$\{(?:([A-Za-z_][A-Za-z0-9_]*)\})?/g;

/** `$${` is a literal `${`, a lone `$` stays; `bad`: the text from the first `${` not followed by a name and `}`. */
function scan(
  text: string,
  lookup: (name: string) => string,
): { text: string } | { bad: string } {
  let bad: string | undefined;
  const out = text.replace(
    REFERENCE,
    (match, name: string | undefined, at: number) => {
      if (match === "$${") return "${";
      if (name !== undefined) return lookup(name);
      bad ??= text.slice(at, at + 24);
      return match;
    },
  );
  return bad === undefined ? { text: out } : { bad };
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
