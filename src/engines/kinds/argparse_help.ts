// The flags a Python argparse help lists (vLLM, SGLang): option lines
// indented by two spaces, flags comma-separated each with its metavar, help
// after two spaces or on later lines indented further (CPython's
// `Lib/argparse.py`, `HelpFormatter._format_action_invocation`).

export function argparseFlags(text: string): string[] {
  // Help text wrapped onto later lines is indented by 24 or more.
  return helpFlags(
    text,
    (line) => line.match(/^ {2,8}(-\S.*?)(?: {2,}|$)/)?.[1],
    ", ",
  );
}

/** The flags of each line's invocation (`-c, --ctx-size N`), value hints left out. */
export function helpFlags(
  text: string,
  invocation: (line: string) => string | undefined,
  comma: string | RegExp,
): string[] {
  return text.split("\n").flatMap((line) =>
    (invocation(line)?.split(comma) ?? []).map((part) => part.split(" ")[0]!)
      .filter((flag) => /^--?[A-Za-z0-9][\w.-]*$/.test(flag))
  );
}
