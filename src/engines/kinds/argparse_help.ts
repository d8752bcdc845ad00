// The flags a Python argparse help lists (vLLM, SGLang): option lines
// indented by two spaces, flags comma-separated each with its metavar, help
// after two spaces or on later lines indented further (CPython's
// `Lib/argparse.py`, `HelpFormatter._format_action_invocation`).

export function argparseFlags(text: string): string[] {
  const flags: string[] = [];
  for (const line of text.split("\n")) {
    // Help text wrapped onto later lines is indented by 24 or more.
    const invocation = line.match(/^ {2,8}(-\S.*?)(?: {2,}|$)/)?.[1];
    if (invocation === undefined) continue;
    for (const part of invocation.split(", ")) {
      const flag = part.split(" ")[0]!;
      if (/^--?[A-Za-z0-9][\w.-]*$/.test(flag)) flags.push(flag);
    }
  }
  return flags;
}
