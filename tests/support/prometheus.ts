/** Reading Prometheus text in tests, with a real text-format parser (never regular expressions). */
import assert from "node:assert/strict";
import parsePrometheusTextFormat from "parse-prometheus-text-format";

/** One family as parse-prometheus-text-format returns it (the package ships no types). */
export interface ParsedFamily {
  name: string;
  help: string;
  type: string;
  metrics: { value: string; labels?: Record<string, string> }[];
}

/** Parses exposition text into families by name. */
export function parse(text: string): Map<string, ParsedFamily> {
  const families = parsePrometheusTextFormat(text) as ParsedFamily[];
  return new Map(families.map((f) => [f.name, f]));
}

/** The family called `name`; fails when it is missing. */
export function get(
  families: Map<string, ParsedFamily>,
  name: string,
): ParsedFamily {
  const found = families.get(name);
  assert.ok(found, `family ${name} is missing`);
  return found;
}
