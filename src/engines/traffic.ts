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

/** A reading from a `/metrics` body; null when a family is missing (garbage, another server). */
export function readTraffic(
  text: string,
  rule: TrafficRule,
  at: number,
): TrafficReading | null {
  const names = [
    rule.running,
    rule.waiting,
    rule.promptTokens,
    rule.generatedTokens,
  ];
  const sums = sumSamples(text, names);
  const [running, waiting, prompt, generated] = names.map((name) => sums[name]);
  if (running == null || waiting == null) return null;
  if (prompt == null || generated == null) return null;
  return { running, waiting, prompt, generated, at };
}

export function trafficOf(
  previous: TrafficReading | null,
  current: TrafficReading,
): Traffic {
  const seconds = previous === null ? 0 : (current.at - previous.at) / 1000;
  const tokens = current.generated - (previous?.generated ?? 0);
  return {
    running: current.running,
    waiting: current.waiting,
    tokens_per_s: seconds > 0 && tokens >= 0
      ? Math.round(tokens / seconds * 10) / 10
      : null,
    at: new Date(current.at).toISOString(),
  };
}

function countersMoved(a: TrafficReading, b: TrafficReading): boolean {
  return a.prompt !== b.prompt || a.generated !== b.generated;
}

export function stallMark(
  mark: TrafficReading | null,
  current: TrafficReading,
): TrafficReading {
  return mark === null || current.running === 0 ||
      countersMoved(mark, current)
    ? current
    : mark;
}

/** `3 requests running, no token for 300 s`; a timeout of 0 is off. Only the prompt counter moving (a long prefill) is progress. */
export function stalled(
  mark: TrafficReading,
  current: TrafficReading,
  stallTimeoutMs: number,
): string | null {
  const quiet = current.at - mark.at;
  if (stallTimeoutMs <= 0 || current.running < 1 || quiet < stallTimeoutMs) {
    return null;
  }
  if (countersMoved(mark, current)) return null;
  const n = current.running;
  return `${n} request${n === 1 ? "" : "s"} running, no token for ${
    Math.round(quiet / 1000)
  } s`;
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

/** Null for a verb with no cheap request, and for an engine set to sleep when idle (a canary would keep it awake). */
export function canaryRequest(
  card: ModelCard,
  kind: EngineKind,
): CanaryRequest | null {
  const canary = CANARY[card.verb];
  const sleep = kind.traffic?.sleepFlag;
  if (canary === undefined || (sleep && flagValue(card.args, [sleep]))) {
    return null;
  }
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

/** Each sample's sum over its label sets (vLLM writes one per engine core); null where none is finite. */
export function sumSamples(
  text: string,
  names: readonly string[],
): Record<string, number | null> {
  const sums: Record<string, number | null> = {};
  for (const name of names) sums[name] = null;
  for (const raw of text.split("\n")) {
    // A comment, a blank line: no name.
    const line = raw.trim();
    const name = NAME.exec(line)?.[0];
    if (name === undefined || !Object.hasOwn(sums, name)) continue;
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
