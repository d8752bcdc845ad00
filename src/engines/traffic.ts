// Traffic from an engine's own counters, and the pure rules the engine object
// applies each health round: tokens/s, stalled under load, the idle canary.
// Two marks carry the history: the stall mark stays put while requests run and
// no token counter moves; the quiet mark stays put while nothing runs and no
// counter moves. A counter that goes down (the engine restarted) has moved.
import type { ModelCard, Verb } from "../catalogue.ts";
import type { EngineKind, TrafficRule } from "./kinds/engine_kind.ts";
import { flagValue } from "./kinds/flag_values.ts";
import { sumSamples } from "./prometheus_text.ts";

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

/** The kind's rule, else (`engine: command`) the card's `metrics`, else none. */
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
  if (
    running == null || waiting == null || prompt == null || generated == null
  ) {
    return null;
  }
  return { running, waiting, prompt, generated, at };
}

/** Generated tokens per second since `previous`, one decimal. */
export function trafficOf(
  previous: TrafficReading | null,
  current: TrafficReading,
): Traffic {
  const seconds = previous === null ? 0 : (current.at - previous.at) / 1000;
  const tokens = previous === null
    ? -1
    : current.generated - previous.generated;
  return {
    running: current.running,
    waiting: current.waiting,
    tokens_per_s: seconds > 0 && tokens >= 0
      ? Math.round(tokens / seconds * 10) / 10
      : null,
    at: new Date(current.at).toISOString(),
  };
}

/** Either token counter changed: progress (a reset too: the engine restarted). */
function countersMoved(a: TrafficReading, b: TrafficReading): boolean {
  return a.prompt !== b.prompt || a.generated !== b.generated;
}

/** The reading the stall clock counts from: it moves on while idle or while tokens flow. */
export function stallMark(
  mark: TrafficReading | null,
  current: TrafficReading,
): TrafficReading {
  return mark === null || current.running === 0 ||
      countersMoved(mark, current)
    ? current
    : mark;
}

/**
 * `3 requests running, no token for 300 s` once requests have run for
 * `stallTimeoutMs` with neither token counter moving; null otherwise, and
 * always with a timeout of 0 (off). A slow token, or only the prompt counter
 * moving (a long prefill), is progress.
 */
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

/** The reading the canary's interval counts from: it moves on while anything runs, waits or counts. */
export function quietMark(
  mark: TrafficReading | null,
  current: TrafficReading,
): TrafficReading {
  return mark === null || current.running > 0 || current.waiting > 0 ||
      countersMoved(mark, current)
    ? current
    : mark;
}

/** Nothing ran and no counter moved for `intervalMs` (0: off). */
export function canaryDue(
  mark: TrafficReading,
  current: TrafficReading,
  intervalMs: number,
): boolean {
  return intervalMs > 0 && current.running === 0 && current.waiting === 0 &&
    !countersMoved(mark, current) && current.at - mark.at >= intervalMs;
}

/** The cheapest request a canary sends: a path under the engine's base URL and a JSON body. */
export interface CanaryRequest {
  readonly path: string;
  readonly body: Readonly<Record<string, unknown>>;
}

const CANARY: Partial<Record<Verb, CanaryRequest>> = {
  chat: {
    path: "/v1/chat/completions",
    body: { messages: [{ role: "user", content: "hi" }], max_tokens: 1 },
  },
  complete: {
    path: "/v1/completions",
    body: { prompt: "hi", max_tokens: 1 },
  },
  embed: { path: "/v1/embeddings", body: { input: "hi" } },
};

/**
 * The canary for a card, with the served name as `model`; null for a verb
 * with no cheap request, and for an engine set to sleep when idle (a canary
 * would count as activity and keep it awake for ever).
 */
export function canaryRequest(
  card: ModelCard,
  kind: EngineKind,
): CanaryRequest | null {
  const canary = CANARY[card.verb];
  const sleep = kind.traffic?.sleepFlag;
  if (canary === undefined) return null;
  if (sleep !== undefined && flagValue(card.args, [sleep]) !== undefined) {
    return null;
  }
  return { path: canary.path, body: { model: card.name, ...canary.body } };
}
