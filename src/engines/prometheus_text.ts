// The Prometheus text format (exposition format 0.0.4), the subset the
// engines write: `# HELP`/`# TYPE` comments, `name{labels} value [timestamp]`
// samples, label values with `\\`, `\"` and `\n` escapes, `NaN`, `+Inf`,
// `-Inf` and exponents. Only the samples named are read, so a large body
// (vLLM's histograms) costs one scan of its lines; the caller caps the body
// (METRICS_MAX_BYTES) before it gets here. A counter's `_created` sample has a
// name of its own, so it is never taken for the counter.

/** What the caller reads of a `/metrics` body at most: vLLM's is about 100 KB per engine. */
export const METRICS_MAX_BYTES = 4 * 1024 * 1024;

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
const NUMBER = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;

/** `NaN`, `+Inf`, `-Inf`, decimals and exponents; undefined when not a number. */
export function sampleValue(text: string): number | undefined {
  if (text === "NaN") return NaN;
  if (text === "+Inf" || text === "Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  return NUMBER.test(text) ? Number(text) : undefined;
}

/**
 * Each named sample's sum over its label sets (vLLM writes one set per engine
 * core); null where no sample of that name has a finite value. NaN and ±Inf
 * samples are left out of the sum; lines that do not parse are skipped.
 *
 * @example
 * ```ts ignore
 * sumSamples('a{engine="0"} 2\na{engine="1"} 3\n', ["a", "b"]); // { a: 5, b: null }
 * ```
 */
export function sumSamples(
  text: string,
  names: readonly string[],
): Record<string, number | null> {
  const wanted = new Set(names);
  const sums: Record<string, number | null> = {};
  for (const name of names) sums[name] = null;
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const name = NAME.exec(line)?.[0];
    if (name === undefined || !wanted.has(name)) continue;
    // Only numbers follow a label set: the last `}` closes it, whatever its values hold.
    const rest = line[name.length] === "{"
      ? line.lastIndexOf("}") + 1
      : name.length;
    if (rest === 0) continue;
    const fields = line.slice(rest).trim().split(/\s+/);
    if (fields.length > 2 || (fields[1] && !/^-?\d+$/.test(fields[1]))) {
      continue;
    }
    const value = sampleValue(fields[0] ?? "");
    if (value === undefined || !Number.isFinite(value)) continue;
    sums[name] = (sums[name] ?? 0) + value;
  }
  return sums;
}
