/**
 * The flags a Python `argparse` help lists (vLLM's `vllm serve --help=all`,
 * SGLang's `launch_server --help`). Its option lines are indented by two
 * spaces and hold the flags, comma-separated, each with its metavar:
 * `  --max-model-len MAX_MODEL_LEN, -ml MAX_MODEL_LEN` or
 * `  --enable-prefix-caching, --no-enable-prefix-caching`; the help text
 * follows after two spaces or on the next lines, indented further (CPython's
 * `Lib/argparse.py`, `HelpFormatter._format_action_invocation`). Pure.
 *
 * @module
 */

/**
 * Every flag an argparse help text lists, dashes included, in order.
 *
 * @param text The help text.
 * @returns The flags; `[]` when none is found.
 *
 * @example
 * ```ts ignore
 * argparseFlags("options:\n  -tp TP, --tensor-parallel-size TP  How many GPUs.\n"); // ["-tp", "--tensor-parallel-size"]
 * ```
 */
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
