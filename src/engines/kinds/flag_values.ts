// Values from a card's `args` as an engine reads its argv: `--flag value` or
// `--flag=value`, `_` read as `-` in long names, the last occurrence winning.

/** The detail of an unusable size or share; GPU placement prefixes the card's name. */
export class FlagValueError extends Error {
  override name: string = "FlagValueError";
}

/** The first of `names` without its dashes, and the last value given. */
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
    found = eq > 0 ? token.slice(eq + 1) : argv[++i] ?? "";
  }
  return found === undefined
    ? undefined
    : { name: names[0]!.replace(/^-+/, ""), value: found };
}

export function sizeFlag(
  argv: readonly string[],
  names: readonly string[],
): { name: string; size: number } | undefined {
  const flag = flagValue(argv, names);
  if (flag === undefined) return undefined;
  const size = Number(flag.value);
  if (!/^\s*\d+\s*$/.test(flag.value) || !(size >= 1)) {
    const its = `its ${flag.name} is ${JSON.stringify(flag.value)}`;
    throw new FlagValueError(
      `${its} (expected a whole number, 1 or more; or set the card's gpus)`,
    );
  }
  return { name: flag.name, size };
}

/** `tensor-parallel-size 2 × pipeline-parallel-size 2`: the product of the sizes given. */
export function sizeProduct(
  sizes: readonly ({ name: string; size: number } | undefined)[],
): { count: number; from: string } {
  const given = sizes.filter((size) => size !== undefined);
  return {
    count: given.reduce((product, f) => product * f.size, 1),
    from: given.map((f) => `${f.name} ${f.size}`).join(" × "),
  };
}
