/**
 * The card fields' value readers: each takes one value of a card and returns
 * it checked, or fails with the card, field and line.
 *
 * @module
 */
import { isMap, isSeq } from "yaml";
import { hint } from "./catalogue_error.ts";
import { type CardMetrics, Modality } from "./model_card.ts";
import { referenceProblem, type ValueSite } from "./card_expand.ts";
import { clip, describe, type Field } from "./yaml_nodes.ts";

const MODALITIES: readonly Modality[] = Object.values(Modality);
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const SAMPLE_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const METRICS_KEYS: Record<string, keyof CardMetrics> = {
  path: "path",
  running: "running",
  waiting: "waiting",
  prompt_tokens: "promptTokens",
  generated_tokens: "generatedTokens",
};
const METRICS =
  "a mapping of path (default /metrics), running, waiting, prompt_tokens and generated_tokens to Prometheus sample names";

export function text(f: Field, expected: string, allowEmpty = false): string {
  const value = f.scalar;
  if (typeof value !== "string" || (!allowEmpty && value.trim() === "")) {
    f.expected(expected);
  }
  return value;
}

/** Seconds, 0 or more; `expected` says what they are for. */
export function seconds(f: Field, expected: string): number {
  const value = f.scalar;
  if (typeof value !== "number" || !(value >= 0) || value === Infinity) {
    f.expected(expected);
  }
  return value;
}

export function oneOf<T extends string>(f: Field, allowed: readonly T[]): T {
  const value = f.scalar;
  if (typeof value !== "string" || !allowed.includes(value as T)) {
    f.expected(
      `one of ${allowed.join(", ")}`,
      typeof value === "string" ? hint(value, allowed) : "",
    );
  }
  return value as T;
}

export function readGpus(f: Field): number {
  const value = f.scalar;
  if (
    typeof value !== "number" || !Number.isFinite(value) ||
    !(Number.isInteger(value) ? value >= 0 : value > 0 && value < 1)
  ) {
    f.expected(
      "0 (no GPU), a whole number of GPUs (1, 2, ...) or a share of one GPU between 0 and 1 (such as 0.3)",
    );
  }
  return value;
}

export function readModality(f: Field): Modality[] {
  if (!isSeq(f.value)) return [oneOf(f, MODALITIES)];
  if (f.value.items.length === 0) {
    f.fail(
      `expected one or more of ${MODALITIES.join(", ")}, got an empty list`,
    );
  }
  return [...new Set(f.items().map((item) => oneOf(item, MODALITIES)))];
}

export function readLocal(f: Field): string {
  const local = text(f, "a path relative to <directory>/models");
  if (/^(?:[\\/]|[A-Za-z]:)/.test(local)) {
    f.fail(
      `expected a path relative to <directory>/models, got the absolute path '${
        clip(local)
      }'`,
    );
  }
  if (local.split(/[\\/]/).includes("..")) {
    f.fail(
      `expected a path inside <directory>/models, got '${
        clip(local)
      }' (no '..' segments)`,
    );
  }
  return local;
}

/** References are checked at load time: a typo fails even in a card nobody requests. */
export function siteOf(f: Field, value: string): ValueSite {
  const problem = referenceProblem(value);
  if (problem !== undefined) f.fail(problem);
  return { field: f.where.field ?? "", line: f.ctx.lineOf(f.where.node) ?? 0 };
}

/** Numbers in decimal, booleans as `true`/`false`. */
function argText(f: Field, expected = "a string, number or boolean"): string {
  const value = f.scalar;
  if (typeof value === "string") return value;
  if (typeof value === "boolean") return String(value);
  if (typeof value === "number" && Number.isFinite(value)) return String(value);
  f.expected(expected);
}

/** A list is literal argv; a mapping gives `--flag value` pairs. */
export function readArgs(
  f: Field,
): { argv: string[]; sites: (ValueSite | undefined)[] } {
  const argv: string[] = [];
  const sites: (ValueSite | undefined)[] = [];
  function add(text: string, from?: Field): void {
    sites.push(from && siteOf(from, text));
    argv.push(text);
  }
  if (isSeq(f.value)) {
    for (const item of f.items()) add(argText(item), item);
    return { argv, sites };
  }
  if (!isMap(f.value)) {
    f.expected("a mapping of flags to values or a list of arguments");
  }
  for (const [key, entry] of f.entries()) {
    if (key === "" || key === "-" || key === "--") {
      entry.fail(`expected a flag name, got '${key}'`, entry.key);
    }
    const flag = key.startsWith("-") ? key : `--${key}`;
    const scalar = entry.scalar;
    if (scalar === true) add(flag);
    if (typeof scalar === "boolean") continue;
    // A list repeats the flag for each item.
    const list = isSeq(entry.value);
    for (const item of list ? entry.items() : [entry]) {
      const value = item.value;
      add(flag);
      add(
        isMap(value) || (list && isSeq(value))
          ? JSON.stringify(item.plain())
          : argText(
            item,
            list
              ? "a string, number, boolean or mapping"
              : "true, false, a string, number, list or mapping",
          ),
        item,
      );
    }
  }
  return { argv, sites };
}

export function readEnv(
  f: Field,
): { env: Record<string, string>; sites: Record<string, ValueSite> } {
  if (!isMap(f.value)) f.expected("a mapping of variable names to values");
  const env: Record<string, string> = {};
  const sites: Record<string, ValueSite> = {};
  for (const [key, entry] of f.entries()) {
    if (!ENV_NAME.test(key)) {
      entry.fail(
        `expected a variable name ([A-Za-z_][A-Za-z0-9_]*), got '${clip(key)}'`,
        entry.key,
      );
    }
    env[key] = argText(entry);
    sites[key] = siteOf(entry, env[key]);
  }
  return { env, sites };
}

export function readCommand(f: Field): { argv: string[]; sites: ValueSite[] } {
  const node = f.value;
  if (!isSeq(node) || node.items.length === 0) {
    f.fail(
      `expected a non-empty argv list such as [my-engine, --port, "{port}"], got ${
        isSeq(node) ? "an empty list" : describe(node)
      }`,
    );
  }
  const items = f.items();
  const argv = items.map((item) => argText(item));
  if (argv[0]?.trim() === "") {
    items[0]!.fail("expected a program name, got ''", f.where.node);
  }
  return { argv, sites: argv.map((arg, i) => siteOf(items[i]!, arg)) };
}

export function readMetrics(f: Field): CardMetrics {
  if (!isMap(f.value)) f.expected(METRICS);
  const read: Record<string, string> = { path: "/metrics" };
  for (const [key, entry] of f.entries()) {
    if (!Object.hasOwn(METRICS_KEYS, key)) {
      entry.fail(`unknown key (expected ${METRICS})`, entry.key);
    }
    const name = METRICS_KEYS[key]!;
    const value = entry.scalar;
    if (
      typeof value !== "string" ||
      !(name === "path" ? /^\/\S*$/.test(value) : SAMPLE_NAME.test(value))
    ) {
      entry.expected(
        name === "path"
          ? "a path such as /metrics"
          : "a Prometheus sample name such as my_engine:requests_running",
      );
    }
    read[name] = value as string;
  }
  for (const [key, name] of Object.entries(METRICS_KEYS)) {
    if (read[name] === undefined) {
      f.fail(`${key} is missing (expected ${METRICS})`);
    }
  }
  return Object.freeze(read) as unknown as CardMetrics;
}
