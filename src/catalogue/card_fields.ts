/**
 * The card fields' value readers: each takes one YAML value of a card and
 * returns it checked, or fails with the card, field and line.
 *
 * @module
 */
import { isMap, isSeq } from "yaml";
import { hint } from "./catalogue_error.ts";
import { type CardMetrics, Modality } from "./model_card.ts";
import { referenceProblem, type ValueSite } from "./card_expand.ts";
import {
  clip,
  type Context,
  deref,
  describe,
  fail,
  type FieldValue,
  keyText,
  lineOf,
  plainValue,
  scalarValue,
  type Where,
} from "./yaml_nodes.ts";

const MODALITIES: readonly Modality[] = Object.values(Modality);
const SAMPLE_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const METRICS_KEYS = {
  running: "running",
  waiting: "waiting",
  prompt_tokens: "promptTokens",
  generated_tokens: "generatedTokens",
} as const;

export function readMetrics(ctx: Context, field: FieldValue): CardMetrics {
  const node = field.value;
  const expected =
    "a mapping of path (default /metrics), running, waiting, prompt_tokens and generated_tokens to Prometheus sample names";
  if (!isMap(node)) {
    fail(ctx, field.where, `expected ${expected}, got ${describe(node)}`);
  }
  const read: Record<string, string> = { path: "/metrics" };
  for (const pair of node.items) {
    const key = keyText(ctx, field.where, pair.key);
    const where = {
      ...field.where,
      field: `metrics.${key}`,
      node: pair.value ?? pair.key,
    };
    if (key !== "path" && !(key in METRICS_KEYS)) {
      fail(
        ctx,
        { ...where, node: pair.key },
        `unknown key (expected ${expected})`,
      );
    }
    const value = scalarValue(pair.value);
    const ok = typeof value === "string" &&
      (key === "path" ? /^\/\S*$/.test(value) : SAMPLE_NAME.test(value));
    if (!ok) {
      fail(
        ctx,
        where,
        `expected ${
          key === "path"
            ? "a path such as /metrics"
            : "a Prometheus sample name such as my_engine:requests_running"
        }, got ${describe(pair.value)}`,
      );
    }
    read[
      key === "path" ? key : METRICS_KEYS[key as keyof typeof METRICS_KEYS]
    ] = value as string;
  }
  for (const [key, name] of Object.entries(METRICS_KEYS)) {
    if (read[name] === undefined) {
      fail(ctx, field.where, `${key} is missing (expected ${expected})`);
    }
  }
  return Object.freeze(read) as unknown as CardMetrics;
}
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** References are checked at load time: a typo fails even in a card nobody requests. */
export function siteOf(ctx: Context, where: Where, value: string): ValueSite {
  const problem = referenceProblem(value);
  if (problem !== undefined) fail(ctx, where, problem);
  return {
    field: where.field ?? "",
    line: lineOf(ctx, where.node) ?? 0,
  };
}

export function readGpus(ctx: Context, field: FieldValue): number {
  const value = scalarValue(field.value);
  const ok = typeof value === "number" && Number.isFinite(value) &&
    (Number.isInteger(value) ? value >= 0 : value > 0 && value < 1);
  if (!ok) {
    fail(
      ctx,
      field.where,
      `expected 0 (no GPU), a whole number of GPUs (1, 2, ...) or a share of one GPU between 0 and 1 (such as 0.3), got ${
        describe(field.value)
      }`,
    );
  }
  return value as number;
}

/** Seconds, 0 or more; `expected` says what they are for. */
export function seconds(
  ctx: Context,
  field: FieldValue,
  expected: string,
): number {
  const value = scalarValue(field.value);
  if (typeof value !== "number" || !(value >= 0) || value === Infinity) {
    fail(
      ctx,
      field.where,
      `expected ${expected}, got ${describe(field.value)}`,
    );
  }
  return value;
}

export function text(
  ctx: Context,
  field: FieldValue,
  expected: string,
  allowEmpty = false,
): string {
  const value = scalarValue(field.value);
  if (typeof value !== "string" || (!allowEmpty && value.trim() === "")) {
    fail(
      ctx,
      field.where,
      `expected ${expected}, got ${describe(field.value)}`,
    );
  }
  return value;
}

export function oneOf<T extends string>(
  ctx: Context,
  field: FieldValue,
  allowed: readonly T[],
): T {
  const value = scalarValue(field.value);
  if (
    typeof value !== "string" || !(allowed as readonly string[]).includes(value)
  ) {
    const guess = typeof value === "string" ? hint(value, allowed) : "";
    fail(
      ctx,
      field.where,
      `expected one of ${allowed.join(", ")}, got ${
        describe(field.value)
      }${guess}`,
    );
  }
  return value as T;
}

export function readModality(
  ctx: Context,
  field: FieldValue,
): Modality[] {
  if (!isSeq(field.value)) return [oneOf(ctx, field, MODALITIES)];
  if (field.value.items.length === 0) {
    fail(
      ctx,
      field.where,
      `expected one or more of ${MODALITIES.join(", ")}, got an empty list`,
    );
  }
  const out: Modality[] = [];
  field.value.items.forEach((item, index) => {
    const where = {
      ...field.where,
      field: `${field.where.field}[${index}]`,
      node: item,
    };
    const modality = oneOf(
      ctx,
      { value: deref(ctx, where, item), where },
      MODALITIES,
    );
    if (!out.includes(modality)) out.push(modality);
  });
  return out;
}

export function readLocal(
  ctx: Context,
  field: FieldValue,
): string {
  const local = text(ctx, field, "a path relative to <directory>/models");
  if (/^(?:[\\/]|[A-Za-z]:)/.test(local)) {
    fail(
      ctx,
      field.where,
      `expected a path relative to <directory>/models, got the absolute path '${
        clip(local)
      }'`,
    );
  }
  if (local.split(/[\\/]/).includes("..")) {
    fail(
      ctx,
      field.where,
      `expected a path inside <directory>/models, got '${
        clip(local)
      }' (no '..' segments)`,
    );
  }
  return local;
}

/** Numbers in decimal, booleans as `true`/`false`. */
function argText(
  ctx: Context,
  where: Where,
  item: unknown,
  expected = "a string, number or boolean",
): string {
  const node = deref(ctx, where, item);
  const value = scalarValue(node);
  if (typeof value === "string") return value;
  if (typeof value === "boolean") return String(value);
  if (typeof value === "number" && Number.isFinite(value)) return String(value);
  fail(ctx, where, `expected ${expected}, got ${describe(node)}`);
}

export function readArgs(
  ctx: Context,
  field: FieldValue,
): { argv: string[]; sites: (ValueSite | undefined)[] } {
  const node = field.value;
  const base = field.where.field ?? "args";
  const argv: string[] = [];
  const sites: (ValueSite | undefined)[] = [];
  function flagItem(flag: string): void {
    argv.push(flag);
    sites.push(undefined);
  }
  function valueItem(where: Where, value: string): void {
    sites.push(siteOf(ctx, where, value));
    argv.push(value);
  }
  if (isSeq(node)) {
    // A list is literal argv.
    node.items.forEach((item, index) => {
      const where = { ...field.where, field: `${base}[${index}]`, node: item };
      valueItem(where, argText(ctx, where, item));
    });
    return { argv, sites };
  }
  if (!isMap(node)) {
    fail(
      ctx,
      field.where,
      `expected a mapping of flags to values or a list of arguments, got ${
        describe(node)
      }`,
    );
  }
  for (const pair of node.items) {
    const key = keyText(ctx, field.where, pair.key);
    const where = {
      ...field.where,
      field: `${base}.${key}`,
      node: pair.value ?? pair.key,
    };
    if (key === "" || key === "-" || key === "--") {
      fail(
        ctx,
        { ...where, node: pair.key },
        `expected a flag name, got '${key}'`,
      );
    }
    const flag = key.startsWith("-") ? key : `--${key}`;
    const value = deref(ctx, where, pair.value);
    const scalar = scalarValue(value);
    if (scalar === true) flagItem(flag);
    else if (scalar === false) continue;
    else if (isMap(value)) {
      flagItem(flag);
      valueItem(where, JSON.stringify(plainValue(ctx, where, value)));
    } else if (isSeq(value)) {
      value.items.forEach((item, index) => {
        const itemWhere = {
          ...where,
          field: `${where.field}[${index}]`,
          node: item,
        };
        const resolved = deref(ctx, itemWhere, item);
        flagItem(flag);
        valueItem(
          itemWhere,
          isMap(resolved) || isSeq(resolved)
            ? JSON.stringify(plainValue(ctx, itemWhere, resolved))
            : argText(
              ctx,
              itemWhere,
              resolved,
              "a string, number, boolean or mapping",
            ),
        );
      });
    } else {
      flagItem(flag);
      valueItem(
        where,
        argText(
          ctx,
          where,
          value,
          "true, false, a string, number, list or mapping",
        ),
      );
    }
  }
  return { argv, sites };
}

export function readEnv(
  ctx: Context,
  field: FieldValue,
): { env: Record<string, string>; sites: Record<string, ValueSite> } {
  const node = field.value;
  if (!isMap(node)) {
    fail(
      ctx,
      field.where,
      `expected a mapping of variable names to values, got ${describe(node)}`,
    );
  }
  const env: Record<string, string> = {};
  const sites: Record<string, ValueSite> = {};
  for (const pair of node.items) {
    const key = keyText(ctx, field.where, pair.key);
    const where = {
      ...field.where,
      field: `env.${key}`,
      node: pair.value ?? pair.key,
    };
    if (!ENV_NAME.test(key)) {
      fail(
        ctx,
        { ...where, node: pair.key },
        `expected a variable name ([A-Za-z_][A-Za-z0-9_]*), got '${clip(key)}'`,
      );
    }
    env[key] = argText(ctx, where, pair.value);
    sites[key] = siteOf(ctx, where, env[key]);
  }
  return { env, sites };
}

export function readCommand(
  ctx: Context,
  field: FieldValue,
): { argv: string[]; sites: ValueSite[] } {
  const node = field.value;
  if (!isSeq(node) || node.items.length === 0) {
    fail(
      ctx,
      field.where,
      `expected a non-empty argv list such as [my-engine, --port, "{port}"], got ${
        isSeq(node) ? "an empty list" : describe(node)
      }`,
    );
  }
  const wheres = node.items.map((item, index) => ({
    ...field.where,
    field: `command[${index}]`,
    node: item,
  }));
  const argv = node.items.map((item, index) =>
    argText(ctx, wheres[index]!, item)
  );
  if (argv[0]?.trim() === "") {
    fail(
      ctx,
      { ...field.where, field: "command[0]" },
      "expected a program name, got ''",
    );
  }
  return {
    argv,
    sites: argv.map((item, index) => siteOf(ctx, wheres[index]!, item)),
  };
}
