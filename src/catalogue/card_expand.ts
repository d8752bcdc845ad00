// `${NAME}` in a card's expandable values, replaced from the launcher's
// environment at start-up; `$${` is a literal `${`.
/** A requested card refers to a variable the launcher's environment does not set. */
export class UnsetVariableError extends Error {
  override name = "UnsetVariableError";

  constructor(
    readonly file: string,
    readonly card: string,
    readonly field: string,
    readonly line: number,
    readonly variable: string,
  ) {
    super(
      `Cannot expand catalogue ${file}: card '${card}', field '${field}' (line ${line}): \${${variable}} is not set (expected ${variable} in the launcher's environment; write $\${ for a literal \${)`,
    );
  }
}

const REFERENCE = /\$\$\{|\$\{(?:([A-Za-z_][A-Za-z0-9_]*)\})?/g;

/** Checked at load time, so a typo fails even in a card nobody requests. */
export function referenceProblem(text: string): string | undefined {
  for (const found of text.matchAll(REFERENCE)) {
    if (found[0] === "$${" || found[1] !== undefined) continue;
    return `bad reference '${
      text.slice(found.index, found.index + 24)
    }' (expected \${NAME} with a name of letters, digits and _, or $\${ for a literal \${)`;
  }
  return undefined;
}

/** `text` with each `${NAME}` replaced by `lookup(NAME)` and `$${` by `${`; the reader has refused bad references. */
export function expandText(
  text: string,
  lookup: (name: string) => string,
): string {
  return text.replace(
    REFERENCE,
    (match, name?: string) =>
      match === "$${" ? "${" : name === undefined ? match : lookup(name),
  );
}
