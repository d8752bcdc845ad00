// Traffic from an engine's own counters (its Prometheus text), and the pure
// rules applied each health round: tokens/s, stalled under load, the idle
// canary. Two marks carry the history: the stall mark stays put while requests
// run and no token counter moves; the quiet mark while nothing runs and no
// counter moves. A counter that goes down (the engine restarted) has moved.
import type { ModelCard, Verb } from "../catalogue.ts";
import type { EngineKind, TrafficRule } from "./kinds/engine_kind.ts";
import { flagValue } from "./kinds/flag_values.ts";

/** One read of the engine's `/metrics`; `at` in epoch ms. */
export interface TrafficReading {
  readonly running: number;
  readonly waiting: number;
  readonly prompt: number;
  readonly generated: number;
  /** The rule's per-step counter, where the text has it ({@linkcode TrafficRule.steps}). */
  readonly steps?: number;
  /** Generated tokens as counted per step: tokens/s is read from them where present. */
  readonly stepTokens?: number;
  /** How far rounding (the rule's `digits`) may put `stepTokens` from the truth. */
  readonly blur?: number;
  /** Seconds spent on the `prompt` tokens (the rule's `steps.batch`). */
  readonly promptSeconds?: number;
  readonly at: number;
}

/** `?detail=1`'s `traffic`: `tokens_per_s` null until two readings (or across a restart). */
export interface Traffic {
  readonly running: number;
  readonly waiting: number;
  readonly tokens_per_s: number | null;
  /** ISO time of the reading. */
  readonly at: string;
}

export function trafficRule(
  card: ModelCard,
  kind: EngineKind,
): TrafficRule | undefined {
  return kind.traffic ?? card.metrics;
}

/** A reading, or `why` there is none; `odd`: values read in a way of their own, each worth one warning. */
export interface TrafficRead {
  readonly reading: TrafficReading | null;
  readonly why?: string;
  readonly odd: readonly string[];
}

/** A reading from a `/metrics` body; none when a family is missing (garbage, another server) or not a number. */
export function parseTraffic(
  text: string,
  rule: TrafficRule,
  at: number,
): TrafficRead {
  const { counter, tokens, perStep, digits, batch } = rule.steps ?? {};
  const off = (v: number) =>
    digits && v ? 10 ** (Math.floor(Math.log10(v)) - digits + 1) / 2 : 0;
  const { running: r, waiting: w, promptTokens: p, generatedTokens: g } = rule;
  const names = [r, w, p, g];
  const extra = [counter, tokens, perStep, batch?.seconds]
    .filter((n) => n !== undefined);
  const { sums, odd, nonFinite } = readSamples(text, [...names, ...extra]);
  const missing = names.find((name) => sums[name] == null);
  if (missing !== undefined) {
    const why = nonFinite[missing] === undefined
      ? `no ${missing} in its answer`
      : `${missing} is ${nonFinite[missing]}`;
    return { reading: null, why, odd: odd.filter((o) => o !== why) };
  }
  const steps = counter === undefined ? null : sums[counter];
  const perToken = tokens === undefined ? steps : sums[tokens];
  const width = perStep === undefined ? 1 : sums[perStep];
  const promptSeconds = batch && sums[batch.seconds];
  const reading: TrafficReading = {
    running: sums[r]!,
    waiting: sums[w]!,
    prompt: sums[p]!,
    generated: sums[g]!,
    ...steps == null ? {} : { steps },
    ...promptSeconds == null ? {} : { promptSeconds },
    ...perToken == null || width == null ? {} : {
      stepTokens: Math.round(perToken * width),
      ...digits && { blur: off(perToken) * width + perToken * off(width) },
    },
    at,
  };
  return { reading, odd };
}

export function readTraffic(
  text: string,
  rule: TrafficRule,
  at: number,
): TrafficReading | null {
  return parseTraffic(text, rule, at).reading;
}

/**
 * Tokens/s over `previous` to `current`; `held` where rounding hides the step
 * ({@linkcode resolved}). `at`: `current`'s time as shown (its own `at` is a
 * monotonic reading where a clock gave one).
 */
export function trafficOf(
  previous: TrafficReading | null,
  current: TrafficReading,
  held: number | null = null,
  at: string = new Date(current.at).toISOString(),
): Traffic {
  const seconds = previous === null ? 0 : (current.at - previous.at) / 1000;
  const tokens = previous === null ? 0 : tokensBetween(previous, current);
  return {
    running: current.running,
    waiting: current.waiting,
    tokens_per_s: previous && !resolved(previous, current)
      ? held
      : seconds > 0 && tokens >= 0
      ? Math.round(tokens / seconds * 10) / 10
      : null,
    at,
  };
}

// Per step where both have it: llama.cpp's and SGLang's totals move only when a request ends.
function tokensBetween(a: TrafficReading, b: TrafficReading): number {
  return a.stepTokens !== undefined && b.stepTokens !== undefined
    ? b.stepTokens - a.stepTokens
    : b.generated - a.generated;
}

/** Whether the tokens between two readings are five times what rounding blurs (a fifth astray at most), or nothing runs now: else the window widens. */
export function resolved(a: TrafficReading, b: TrafficReading): boolean {
  const blur = (a.blur ?? 0) + (b.blur ?? 0);
  return blur < 0.5 || tokensBetween(a, b) >= 5 * blur || !b.running;
}

/** Proof of life: a token counter or the per-step counter moved (down too: a restart). */
export function countersMoved(a: TrafficReading, b: TrafficReading): boolean {
  return a.prompt !== b.prompt || a.generated !== b.generated ||
    a.steps !== b.steps;
}

/** Progress `canaries` one-token requests could not have made: more tokens than one each, or per-step tokens past their prefill and token; never the prompt counter (their own prompts move it). */
export function beyondCanaries(
  a: TrafficReading,
  b: TrafficReading,
  canaries: number,
): boolean {
  const { stepTokens: x } = a, { stepTokens: y } = b;
  return b.generated - a.generated > canaries ||
    (x !== undefined && y !== undefined &&
      y - x > 2 * canaries + (a.blur ?? 0) + (b.blur ?? 0));
}

export function stallMark(
  mark: TrafficReading | null,
  current: TrafficReading,
): TrafficReading {
  return mark === null || current.running + current.waiting === 0 ||
      countersMoved(mark, current)
    ? current
    : mark;
}

/** The tokens of one prefill step as the card sets them (llama.cpp's n_batch); 0 where the rule has none. */
export function batchTokens(card: ModelCard, rule: TrafficRule): number {
  const batch = rule.steps?.batch;
  const set = batch && Number(flagValue(card.args, batch.flags)?.value);
  return batch ? set || batch.tokens : 0;
}

/** `3 requests running, no token for 300 s` (or `3 requests waiting, none running, …`); a timeout of 0 is off. Only the prompt counter moving (a long prefill) is progress, and a step of `batch` prompt tokens may take four times its time at the measured prompt rate. */
export function stalled(
  mark: TrafficReading,
  current: TrafficReading,
  stallTimeoutMs: number,
  batch = 0,
): string | null {
  const quiet = current.at - mark.at;
  const { running, waiting, prompt, promptSeconds } = current;
  const rate = promptSeconds ? prompt / promptSeconds : 0;
  const step = rate > 0 ? 4000 * batch / rate : 0; // later batches attend over more
  if (
    stallTimeoutMs <= 0 || running + waiting < 1 ||
    quiet < Math.max(stallTimeoutMs, step)
  ) {
    return null;
  }
  if (countersMoved(mark, current)) return null;
  const n = running || waiting;
  const how = running ? "running" : "waiting, none running";
  const s = Math.round(quiet / 1000);
  return `${n} request${n === 1 ? "" : "s"} ${how}, no token for ${s} s`;
}

export function quietMark(
  mark: TrafficReading | null,
  current: TrafficReading,
): TrafficReading {
  return mark === null || current.running > 0 || current.waiting > 0 ||
      countersMoved(mark, current)
    ? current
    : mark;
}

export function canaryDue(
  mark: TrafficReading,
  current: TrafficReading,
  intervalMs: number,
): boolean {
  return intervalMs > 0 && current.running === 0 && current.waiting === 0 &&
    !countersMoved(mark, current) && current.at - mark.at >= intervalMs;
}

export interface CanaryRequest {
  readonly path: string;
  readonly body: Readonly<Record<string, unknown>>;
}

const CANARY: Partial<Record<Verb, CanaryRequest>> = {
  chat: {
    path: "/v1/chat/completions",
    body: { messages: [{ role: "user", content: "hi" }], max_tokens: 1 },
  },
  complete: { path: "/v1/completions", body: { prompt: "hi", max_tokens: 1 } },
  embed: { path: "/v1/embeddings", body: { input: "hi" } },
};

/** Null for a verb with no cheap request, and for an engine set to sleep when idle (a canary would keep it awake; llama.cpp's -1 is "disabled"). */
export function canaryRequest(
  card: ModelCard,
  kind: EngineKind,
): CanaryRequest | null {
  const sleep = kind.traffic?.sleepFlag;
  const sleeps = card.sleepAfter ||
    sleep && Number(flagValue(card.args, [sleep])?.value) > 0;
  return sleeps ? null : cheapRequest(card);
}

/** The cheapest request of its verb (one token where it generates), null for a verb with none; also the check after a wake. */
export function cheapRequest(card: ModelCard): CanaryRequest | null {
  const canary = CANARY[card.verb];
  if (canary === undefined) return null;
  return { path: canary.path, body: { model: card.name, ...canary.body } };
}

// The Prometheus text format 0.0.4, the subset the engines write. Only the
// samples named are read, so a large body (vLLM's histograms) costs one scan
// of its lines. A counter's `_created` sample has a name of its own.
const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
const NUMBER = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;

export function sampleValue(text: string): number | undefined {
  if (text === "NaN") return NaN;
  if (text === "+Inf" || text === "Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  return NUMBER.test(text) ? Number(text) : undefined;
}

/**
 * Each sample's sum over its label sets (vLLM writes one per engine core),
 * null where none is finite, and what it read in a way of its own (`odd`): a
 * negative value read as 0, a series given twice read once, a family whose
 * only values are NaN or infinite. A name may hold labels a sample must have
 * (`x{mode="decode"}`).
 */
export function readSamples(
  text: string,
  names: readonly string[],
): {
  sums: Record<string, number | null>;
  odd: string[];
  nonFinite: Record<string, string>;
} {
  const sums: Record<string, number | null> = {};
  const wanted = new Map<string, { key: string; labels: string[] }[]>();
  for (const key of names) {
    sums[key] = null;
    const name = NAME.exec(key)?.[0] ?? key;
    const labels = key.slice(name.length).replace(/^\{|\}$/g, "").split(",")
      .filter(Boolean);
    wanted.set(name, [...wanted.get(name) ?? [], { key, labels }]);
  }
  const odd = new Set<string>();
  const seen = new Set<string>();
  const nonFinite: Record<string, string> = {};
  for (const raw of text.split("\n")) {
    // A comment, a blank line: no name.
    const line = raw.trim();
    const name = NAME.exec(line)?.[0];
    const keys = name === undefined ? undefined : wanted.get(name);
    if (keys === undefined) continue;
    // Only numbers follow a label set: the last `}` closes it, whatever its values hold.
    const rest = line[name!.length] === "{"
      ? line.lastIndexOf("}") + 1
      : name!.length;
    if (rest === 0) continue;
    const fields = line.slice(rest).trim().split(/\s+/);
    if (fields.length > 2 || (fields[1] && !/^-?\d+$/.test(fields[1]))) {
      continue;
    }
    let value = sampleValue(fields[0] ?? "");
    if (value === undefined) continue;
    const series = line.slice(0, rest).replace(/\s+/g, "");
    if (seen.has(series)) {
      odd.add(
        `${name}${series.slice(name!.length)} is written twice (read once)`,
      );
      continue;
    }
    seen.add(series);
    const inner = `,${series.slice(name!.length + 1, -1)}`;
    for (const { key, labels } of keys) {
      if (!labels.every((pair) => inner.includes(`,${pair}`))) continue;
      if (!Number.isFinite(value)) {
        nonFinite[key] = fields[0]!;
        continue;
      }
      if (value < 0) {
        odd.add(
          `${key} reads ${fields[0]} (a count cannot be negative: read as 0)`,
        );
        value = 0;
      }
      sums[key] = (sums[key] ?? 0) + value;
    }
  }
  for (const [key, value] of Object.entries(nonFinite)) {
    if (sums[key] === null) odd.add(`${key} is ${value}`);
    else delete nonFinite[key];
  }
  return { sums, odd: [...odd], nonFinite };
}
