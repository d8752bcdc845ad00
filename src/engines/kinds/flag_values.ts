/**
 * Reads values from a card's `args` as an engine reads its argv: `--flag
 * value` or `--flag=value`, `_` read as `-` in long names, the last occurrence
 * winning. Pure.
 *
 * @module
 */

/**
 * Thrown when a size or share in a card's args is not a usable number; the
 * message is the detail, which GPU placement prefixes with the card's name.
 *
 * @example
 * ```ts ignore
 * throw new FlagValueError('its tensor-parallel-size is "two" (expected a whole number, 1 or more; or set the card\'s gpus)');
 * ```
 */
export class FlagValueError extends Error {
  /** @param detail What the value is and what was expected. */
  constructor(detail: string) {
    super(detail);
    this.name = "FlagValueError";
  }
}

/**
 * The value of the last occurrence of any of `names` in an argv.
 *
 * @param argv The card's args.
 * @param names The flag and its aliases, dashes included.
 * @returns The first of `names` without its dashes, and the value; undefined when absent.
 *
 * @example
 * ```ts ignore
 * flagValue(["--tensor_parallel_size=2"], ["--tensor-parallel-size", "-tp"]); // { name: "tensor-parallel-size", value: "2" }
 * ```
 */
export function flagValue(
  argv: readonly string[],
  names: readonly string[],
): { name: string; value: string } | undefined {
  let found: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const token = argv[i]!;
    if (!token.startsWith("-")) continue;
    const eq = token.indexOf("=");
    let name = eq > 0 ? token.slice(0, eq) : token;
    if (name.startsWith("--")) name = name.replaceAll("_", "-");
    if (!names.includes(name)) continue;
    if (eq > 0) found = token.slice(eq + 1);
    else {
      found = argv[i + 1] ?? "";
      i++;
    }
  }
  return found === undefined
    ? undefined
    : { name: names[0]!.replace(/^-+/, ""), value: found };
}

/**
 * A positive whole-number flag such as a parallel size.
 *
 * @returns The name people read and the size; undefined when absent.
 * @throws {FlagValueError} When the value is not a whole number, 1 or more.
 *
 * @example
 * ```ts ignore
 * sizeFlag(["-tp", "4"], ["--tensor-parallel-size", "-tp"]); // { name: "tensor-parallel-size", size: 4 }
 * ```
 */
export function sizeFlag(
  argv: readonly string[],
  names: readonly string[],
): { name: string; size: number } | undefined {
  const flag = flagValue(argv, names);
  if (flag === undefined) return undefined;
  const size = Number(flag.value);
  if (!/^\s*\d+\s*$/.test(flag.value) || !(size >= 1)) {
    throw new FlagValueError(
      `its ${flag.name} is ${
        JSON.stringify(flag.value)
      } (expected a whole number, 1 or more; or set the card's gpus)`,
    );
  }
  return { name: flag.name, size };
}
