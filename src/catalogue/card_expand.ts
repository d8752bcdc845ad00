// `${NAME}` in a card's expandable values, replaced from the launcher's
// environment at start-up; `$${` is a literal `${`.
/** A requested card refers to a variable the launcher's environment does not set. */
export class UnsetVariableError extends Error {
  readonly file: string;
  readonly card: string;
  readonly field: string;
  readonly line: number;
  readonly variable: string;

  constructor(
    file: string,
    card: string,
    site: { field: string; line: number },
    variable: string,
  ) {
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

/** `text` with each `${NAME}` replaced by `lookup(NAME)`; the reader refuses bad references, so one is left as it is. */
export function expandText(
  text: string,
  lookup: (name: string) => string,
): string {
  if (!text.includes("${")) return text;
  const result = scan(text, lookup);
  return "bad" in result ? text : result.text;
}
