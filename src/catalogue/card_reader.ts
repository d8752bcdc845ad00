/**
 * A catalogue's YAML validated into frozen model cards, field by field.
 * Folder `catalogue/`: the YAML, the cards, `${NAME}` expansion, the errors;
 * public through `catalogue.ts`. It knows nothing of processes, HTTP or GPUs.
 *
 * @module
 */
import { isMap, isScalar, isSeq } from "yaml";
import { secondsExpected, secondsToMs } from "../common/seconds.ts";
import { hint, UnsetVariableError } from "./catalogue_error.ts";
import {
  type CardMetrics,
  ENGINE_NAMES,
  Modality,
  type ModelCard,
  RESTART_POLICIES,
  Verb,
} from "./model_card.ts";
import { clip, Context, describe, Field } from "./yaml_nodes.ts";

const VERBS: readonly Verb[] = Object.values(Verb);
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
// Names become file names, the longest `data/.<name>.engine.json.<16 hex>.tmp`
// (34 bytes more): 128 leaves room under Linux's 255-byte limit.
const MAX_NAME_LENGTH = 128;
const MODALITIES: readonly Modality[] = Object.values(Modality);
const SAMPLE: [RegExp, string] = [
  /^[a-zA-Z_:][a-zA-Z0-9_:]*$/,
  "a Prometheus sample name such as my_engine:requests_running",
];
/** Each key of `metrics`, the pattern of its value and what that is. */
const METRICS_KEYS = new Map<string, [RegExp, string]>([
  ["path", [/^\/\S*$/, "a path such as /metrics"]],
  ["running", SAMPLE],
  ["waiting", SAMPLE],
  ["prompt_tokens", SAMPLE],
  ["generated_tokens", SAMPLE],
]);
const METRICS =
  "a mapping of path (default /metrics), running, waiting, prompt_tokens and generated_tokens to Prometheus sample names";

/** What an expandable value passes through: at load its references are checked, at expansion replaced. */
type Expand = (f: Field, text: string) => string;

/** Each card field's reader, in the order the reader checks them and messages list them. */
const FIELDS: Record<string, (f: Field, expand: Expand) => unknown> = {
  verb: (f) => oneOf(f, VERBS),
  modality: readModality,
  hub: (f) => text(f, "a hub identifier such as org/model"),
  local: readLocal,
  engine: (f) => oneOf(f, ENGINE_NAMES),
  executable: (f, expand) => expand(f, text(f, "a program name or path")),
  command: readCommand,
  args: readArgs,
  env: readEnv,
  description: (f) => text(f, "a text", true),
  restart: (f) => oneOf(f, RESTART_POLICIES),
  failed_retry: (f) => seconds(f, "never tried again"),
  drain_timeout: (f) => seconds(f, "no drain"),
  gpus: readGpus,
  gpu_memory: readBytes,
  metrics: readMetrics,
  stall_timeout: (f) => seconds(f, "no stall detection"),
  canary: flag,
  read_ahead: flag,
  sleep_after: wholeSeconds,
  pin: flag,
  priority: readPriority,
};

function flag(f: Field): boolean {
  if (typeof f.scalar !== "boolean") f.expected("true or false");
  return f.scalar as boolean;
}
const FIELD_NAMES = Object.keys(FIELDS);

/** A card as read, and its YAML to read again when it is expanded. */
export interface ReadCard {
  card: ModelCard;
  body: Field;
}

/** The cards in file order; a {@linkcode CatalogueError} at the first problem. */
export function readCatalogue(
  text: string,
  file: string,
): Map<string, ReadCard> {
  const ctx: Context = new Context(text, file);
  const top: Field = new Field(ctx, ctx.contents, { node: ctx.contents });
  if (!isMap(top.value)) top.expected("a mapping with the one key 'models'");
  let models: Field | undefined;
  for (const [key, entry] of top.entries()) {
    if (key !== "models") {
      const also = hint(key, ["models"]);
      const why = `unknown top-level field (expected only 'models'${also})`;
      entry.fail(why, entry.key);
    }
    entry.value; // Read now, as the fields of a card below.
    models = entry;
  }
  if (models === undefined) {
    top.failAt(
      "models",
      "missing (expected a mapping of catalogue names to model cards)",
      top.value,
    );
  }
  const list = models.value;
  if (!isMap(list) || list.items.length === 0) {
    const got = isMap(list) ? "an empty mapping" : describe(list);
    models.fail(
      `expected a non-empty mapping of catalogue names to model cards, got ${got}`,
      list ?? models.key,
    );
  }

  const cards = new Map<string, ReadCard>();
  const folded = new Map<string, string>();
  for (const [name, entry] of models.entries()) {
    const body = new Field(ctx, entry.node, { card: name, node: entry.key });
    if (name.length > MAX_NAME_LENGTH) {
      body.fail(
        `card name of ${name.length} characters (expected at most ${MAX_NAME_LENGTH}: the name becomes file names such as logs/<name>.log and data/<name>.engine.json, which must fit in 255 bytes)`,
      );
    }
    if (!NAME.test(name)) {
      body.fail(
        "bad card name (expected letters, digits, '.', '_' or '-', starting with a letter or digit: the name becomes a log file name)",
      );
    }
    const clash = folded.get(name.toLowerCase());
    if (clash !== undefined) {
      body.fail(
        `card name differs from '${clash}' only in case (expected names that differ in more than case: they become log file names)`,
      );
    }
    folded.set(name.toLowerCase(), name);
    cards.set(name, { card: readCard(body, checkReferences), body });
  }
  return cards;
}

/** `${NAME}`, or `$${` for a literal `${`. */
const REFERENCE = /\$\$\{|\$\{(?:([A-Za-z_][A-Za-z0-9_]*)\})?/g;

/** References are checked at load time: a typo fails even in a card nobody requests. */
function checkReferences(f: Field, text: string): string {
  for (const found of text.matchAll(REFERENCE)) {
    if (found[0] === "$${" || found[1] !== undefined) continue;
    const ref = text.slice(found.index, found.index + 24);
    f.fail(
      `bad reference '${ref}' (expected \${NAME} with a name of letters, digits and _, or $\${ for a literal \${)`,
    );
  }
  return text;
}

/** The card read again with its `${NAME}`s replaced from `env`; `card` itself when nothing changes. */
export function expandCard(
  { card, body }: ReadCard,
  env: Readonly<Record<string, string | undefined>>,
): ModelCard {
  let changed = false;
  const expanded = readCard(body, (f, text) => {
    // A bad reference never gets here: the load refused it.
    const out = text.replace(REFERENCE, (match, name?: string) => {
      if (name === undefined) return match === "$${" ? "${" : match;
      const found = env[name];
      if (found !== undefined) return found;
      throw new UnsetVariableError(
        body.ctx.file,
        card.name,
        f.where.field ?? "",
        f.ctx.lineOf(f.where.node) ?? 0,
        name,
      );
    });
    changed ||= out !== text;
    return out;
  });
  return changed ? expanded : card;
}

function readCard(body: Field, expand: Expand): ModelCard {
  const name = body.where.card!;
  if (!isMap(body.value)) {
    const got = describe(body.value);
    body.fail(
      `expected a mapping with at least 'verb' and 'hub' or 'local', got ${got}`,
      body.value ?? body.where.node,
    );
  }
  const given = new Map<string, Field>();
  for (const [key, field] of body.entries()) {
    if (!Object.hasOwn(FIELDS, key)) {
      const [names, also] = [FIELD_NAMES.join(", "), hint(key, FIELD_NAMES)];
      field.fail(`unknown field (expected one of ${names}${also})`, field.key);
    }
    // Read now: an unknown anchor is reported in the order of the text.
    field.value;
    given.set(key, field);
  }
  if (!given.has("verb")) {
    body.failAt("verb", `missing (expected one of ${VERBS.join(", ")})`);
  }
  // In the order of ModelCard's fields.
  const card: Record<string, unknown> = {
    name,
    verb: undefined,
    modality: Object.freeze([Modality.TEXT]),
    local: name,
    engine: "vllm",
    args: Object.freeze([]),
    env: Object.freeze({}),
  };
  for (const [field, read] of Object.entries(FIELDS)) {
    const value = given.get(field);
    if (value !== undefined) {
      card[camel(field)] = Object.freeze(read(value, expand));
    }
    if (field === "local" && !given.has("hub") && !given.has("local")) {
      body.failAt(
        "hub",
        "neither 'hub' nor 'local' is given (expected at least one: where the weights come from)",
      );
    }
    if (field === "engine") checkEngine(String(card.engine), given, body);
  }
  return Object.freeze(card) as unknown as ModelCard;
}

/** Only `engine: command` takes `command` (and needs it) and `metrics`. */
function checkEngine(
  engine: string,
  given: Map<string, Field>,
  body: Field,
): void {
  if (engine === "command" && !given.has("command")) {
    body.failAt(
      "command",
      'missing (expected an argv list such as [my-engine, --model, "{model}", --port, "{port}"] when engine is command)',
      given.get("engine")?.value,
    );
  }
  for (const only of ["command", "metrics"]) {
    const f = given.get(only);
    if (engine !== "command" && f !== undefined) {
      f.fail(
        `not allowed with engine ${engine} (expected only with engine: command${
          only === "metrics" ? "; the other engines name their own" : ""
        })`,
        f.key,
      );
    }
  }
}

function camel(key: string): string {
  return key.replace(/_(.)/g, (_, c: string) => c.toUpperCase());
}

function text(f: Field, expected: string, allowEmpty = false): string {
  const value = f.scalar;
  if (typeof value !== "string" || (!allowEmpty && value.trim() === "")) {
    f.expected(expected);
  }
  return value;
}

/** As the command line's seconds: decimal as written (no `0x10`, `1e3`), within a timer's limit. */
function seconds(f: Field, zero: string): number {
  const node = f.value;
  const value = f.scalar;
  const written = isScalar(node) ? node.source : undefined;
  if (
    typeof value !== "number" ||
    secondsToMs(String(written ?? value), 0) === undefined
  ) {
    f.expected(secondsExpected(0, zero));
  }
  return value;
}

/** Idle seconds as an engine's flag takes them (llama.cpp's `--sleep-idle-seconds` is an int). */
function wholeSeconds(f: Field): number {
  const value = f.scalar as number;
  if (!Number.isInteger(value) || value < 0) f.expected(WHOLE_SECONDS);
  return Math.min(value, 2_147_483); // an int's seconds, any engine's
}
/** Who is put to sleep first to make room: an integer, lowest first. */
function readPriority(f: Field): number {
  const value = f.scalar as number;
  if (!Number.isInteger(value) || Math.abs(value) > 1_000_000) {
    f.expected(
      "a whole number such as 0 or 10 (lower is put to sleep first to make room; default 0)",
    );
  }
  return value;
}
const WHOLE_SECONDS =
  "0 (never) or a whole number of idle seconds before the engine sleeps, such as 600";

function oneOf<T extends string>(f: Field, allowed: readonly T[]): T {
  const value = f.scalar;
  if (typeof value !== "string" || !allowed.includes(value as T)) {
    f.expected(
      `one of ${allowed.join(", ")}`,
      typeof value === "string" ? hint(value, allowed) : "",
    );
  }
  return value as T;
}

function readGpus(f: Field): number {
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

/** `24GiB`, `512 MiB`, `20GB` or a whole number of bytes, in bytes. */
function readBytes(f: Field): number {
  const [, n, unit = "b"] =
    /^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b|b)?\s*$/i.exec(String(f.scalar)) ?? [];
  const power = Math.max(0, " kmgt".indexOf(unit[0]!.toLowerCase()));
  const base = unit.length === 3 ? 1024 : 1e3;
  const bytes = Math.floor(Number(n) * base ** power);
  // 300 digits are Infinity (or 1e300): no device's size.
  if (!(bytes >= 2 ** 20 && bytes <= 2 ** 50)) {
    f.expected(
      "a size from 1MiB to 1PiB such as 24GiB, 512MiB or 20GB (units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)",
    );
  }
  return bytes;
}

function readModality(f: Field): Modality[] {
  if (!isSeq(f.value)) return [oneOf(f, MODALITIES)];
  if (f.value.items.length === 0) {
    f.fail(
      `expected one or more of ${MODALITIES.join(", ")}, got an empty list`,
    );
  }
  return [...new Set(f.items().map((item) => oneOf(item, MODALITIES)))];
}

function readLocal(f: Field): string {
  const local = text(f, "a path relative to <directory>/models");
  const shown = clip(local);
  if (/^(?:[\\/]|[A-Za-z]:)/.test(local)) {
    f.fail(
      `expected a path relative to <directory>/models, got the absolute path '${shown}'`,
    );
  }
  if (local.split(/[\\/]/).includes("..")) {
    f.fail(
      `expected a path inside <directory>/models, got '${shown}' (no '..' segments)`,
    );
  }
  return local;
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
function readArgs(f: Field, expand: Expand): string[] {
  if (isSeq(f.value)) {
    return f.items().map((item) => expand(item, argText(item)));
  }
  if (!isMap(f.value)) {
    f.expected("a mapping of flags to values or a list of arguments");
  }
  const argv: string[] = [];
  for (const [key, entry] of f.entries()) {
    if (key === "" || key === "-" || key === "--") {
      entry.fail(`expected a flag name, got '${key}'`, entry.key);
    }
    const flag = key.startsWith("-") ? key : `--${key}`;
    const scalar = entry.scalar;
    if (scalar === true) argv.push(flag);
    if (typeof scalar === "boolean") continue;
    const list = isSeq(entry.value);
    for (const item of list ? entry.items() : [entry]) {
      const value = item.value;
      const arg = isMap(value) || (list && isSeq(value))
        ? JSON.stringify(item.plain())
        : argText(
          item,
          list
            ? "a string, number, boolean or mapping"
            : "true, false, a string, number, list or mapping",
        );
      argv.push(flag, expand(item, arg));
    }
  }
  return argv;
}

function readEnv(f: Field, expand: Expand): Record<string, string> {
  if (!isMap(f.value)) f.expected("a mapping of variable names to values");
  const env: Record<string, string> = {};
  for (const [key, entry] of f.entries()) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) {
      entry.fail(
        `expected a variable name ([A-Za-z_][A-Za-z0-9_]*), got '${clip(key)}'`,
        entry.key,
      );
    }
    env[key] = expand(entry, argText(entry));
  }
  return env;
}

function readCommand(f: Field, expand: Expand): string[] {
  const node = f.value;
  if (!isSeq(node) || node.items.length === 0) {
    const got = isSeq(node) ? "an empty list" : describe(node);
    f.fail(
      `expected a non-empty argv list such as [my-engine, --port, "{port}"], got ${got}`,
    );
  }
  const items = f.items();
  const argv = items.map((item) => argText(item));
  if (argv[0]?.trim() === "") {
    items[0]!.fail("expected a program name, got ''", f.where.node);
  }
  return argv.map((arg, i) => expand(items[i]!, arg));
}

function readMetrics(f: Field): CardMetrics {
  if (!isMap(f.value)) f.expected(METRICS);
  const read: Record<string, string> = { path: "/metrics" };
  for (const [key, entry] of f.entries()) {
    const [pattern, expected] = METRICS_KEYS.get(key) ??
      entry.fail(`unknown key (expected ${METRICS})`, entry.key);
    const value = entry.scalar;
    if (typeof value !== "string" || !pattern.test(value)) {
      entry.expected(expected);
    }
    read[camel(key)] = value as string;
  }
  const missing = [...METRICS_KEYS.keys()].find((key) =>
    read[camel(key)] === undefined
  );
  if (missing) f.fail(`${missing} is missing (expected ${METRICS})`);
  return Object.freeze(read) as unknown as CardMetrics;
}
