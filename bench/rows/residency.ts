/**
 * The residency phase's rows (self-waking half): the first token awake,
 * asleep and from a cold start (p50, p95, their ratios), the extra a wake
 * costs a client against the wake the launcher measured, the residue, and the
 * failed requests.
 *
 * @module
 */
import { median, quantile } from "../plan.ts";
import { type Row, row, type Verdict } from "../report/table.ts";
import type { FirstToken } from "../load/first_token.ts";
import {
  AWAKE_PER_ROUND,
  HEALTH_INTERVAL_S,
  MAX_TOKENS,
  RESIDENCY_MODEL,
  RESIDENCY_ROUNDS,
  type ResidencyResults,
  SLEEP_AFTER_S,
} from "../phases/residency.ts";

/** The method, for the section's first paragraph. */
export function residencyMethod(r: ResidencyResults): string {
  const m = RESIDENCY_MODEL;
  return [
    `The launcher CLI (\`deno run -A mod.ts\`, \`--health-interval ${HEALTH_INTERVAL_S}\`) over the real llama-server`,
    `(node-llama-cpp 3.22.1's llama.cpp, CPU build) serving a GGUF the bench writes with \`tools/gguf.ts\``,
    `(${
      (r.modelBytes / 2 ** 20).toFixed(0)
    } MiB of f32: ${m.blockCount} blocks of width ${m.embeddingLength},`,
    `feed-forward ${m.feedForwardLength}; generated and written in ${
      (r.writeMs / 1000).toFixed(1)
    } s),`,
    `card \`sleep_after: ${SLEEP_AFTER_S}\`, \`ctx-size 256, parallel 1, threads 1\` (two threads on two shared cores stall`,
    `each other whenever one loses its core), an engine key. ${RESIDENCY_ROUNDS} rounds, each:`,
    `wait until \`?detail=1\` says \`sleeping\` (+0.25 s), one streamed chat (first token asleep), then`,
    `${AWAKE_PER_ROUND} more at once (awake), then a cold start: a fresh launcher over a fresh root (the same file, hard-linked,`,
    `in the page cache as the wake's reload finds it), from its spawn to the first token of a chat sent again every 25 ms`,
    `while the port refuses or answers 503. First token: send to the first chunk with content`,
    `(max_tokens ${MAX_TOKENS}; each request's prompt starts with another letter, so awake llama-server's prompt cache`,
    `keeps only the template's tokens before it, 12 of 52, and a wake keeps none: part of the extra a wake costs;`,
    `a logit_bias keeps the byte-level model to ASCII, so the first token is the first chunk). p95 is the nearest rank:`,
    `with fewer than 20 samples, the largest. Ratios are of the p50s. Client-seen extra: each round's asleep first token`,
    `less its awake median. Wake: the launcher's \`last_wake_seconds\` (the engine's \`exiting sleeping state\` line to its`,
    `reload's \`initializing\` line). Residue: resident memory asleep, and awake, as \`?detail=1\`'s \`sleep\` view says.`,
  ].join(" ");
}

function ms(samples: readonly FirstToken[]): number[] {
  return samples.filter((s) => s.ok).map((s) => s.ms);
}

/** The figures the rows and targets read. */
function figures(r: ResidencyResults) {
  const held = r.rounds.filter((round) => round.awakeHeld);
  const awake = ms(held.flatMap((round) => round.awake));
  const asleep = ms(r.rounds.map((round) => round.asleep));
  const cold = ms(r.rounds.map((round) => round.cold));
  const extra = held.filter((round) => round.asleep.ok).map((round) =>
    round.asleep.ms - median(ms(round.awake))
  );
  const wakes = r.rounds.flatMap((round) =>
    round.wakeSeconds === null ? [] : [round.wakeSeconds * 1000]
  );
  const failed = (samples: readonly FirstToken[]) =>
    samples.filter((s) => !s.ok).length;
  return {
    awake,
    asleep,
    cold,
    extra,
    wakes,
    engineStarts: r.rounds.flatMap((round) =>
      round.cold.engineSeconds === null ? [] : [round.cold.engineSeconds * 1000]
    ),
    leftOut: r.rounds.length - held.length,
    failed: {
      awake: failed(r.rounds.flatMap((round) => round.awake)),
      asleep: failed(r.rounds.map((round) => round.asleep)),
      cold: failed(r.rounds.map((round) => round.cold)),
    },
    unavailable: r.rounds.reduce(
      (sum, round) => sum + round.cold.unavailable,
      0,
    ),
  };
}

export function residencyRows(r: ResidencyResults): Row[] {
  const f = figures(r);
  const p50 = (xs: number[]) => quantile(xs, 0.5);
  const p95 = (xs: number[]) => quantile(xs, 0.95);
  const mib = (bytes: number | null) => (bytes ?? Number.NaN) / 2 ** 20;
  return [
    row(
      `first token awake p50 (${f.awake.length} samples)`,
      p50(f.awake),
      "ms",
    ),
    row("first token awake p95", p95(f.awake), "ms"),
    row(
      `first token asleep p50 (${f.asleep.length} samples)`,
      p50(f.asleep),
      "ms",
      {
        label: "awake p50",
        value: p50(f.awake),
      },
    ),
    row("first token asleep p95", p95(f.asleep), "ms", {
      label: "awake p95",
      value: p95(f.awake),
    }),
    row(
      `first token from a cold start p50 (${f.cold.length} samples)`,
      p50(f.cold),
      "ms",
      {
        label: "asleep p50",
        value: p50(f.asleep),
      },
    ),
    row("first token from a cold start p95", p95(f.cold), "ms", {
      label: "asleep p95",
      value: p95(f.asleep),
    }),
    row(
      "cold start: the engine's start, as its launcher measured it, p50",
      p50(f.engineStarts),
      "ms",
    ),
    row(
      `wake the launcher measured p50 (${f.wakes.length} wakes)`,
      p50(f.wakes),
      "ms",
      {
        label: "client-seen extra p50",
        value: p50(f.extra),
      },
    ),
    row("wake the launcher measured p95", p95(f.wakes), "ms", {
      label: "client-seen extra p95",
      value: p95(f.extra),
    }),
    row("resident memory asleep (residue)", mib(r.sleep.residue_bytes), "MiB", {
      label: "awake",
      value: mib(r.sleep.awake_bytes),
    }),
    row("failed requests awake", f.failed.awake, "requests"),
    row("failed requests asleep", f.failed.asleep, "requests"),
    row("failed requests from a cold start", f.failed.cold, "requests"),
    row(
      "cold start: 503 answers while the model loaded (retried)",
      f.unavailable,
      "count",
    ),
  ];
}

/** No failed request; a wake beats a cold start; the launcher's wake is what the client waits. */
export function residencyTargets(r: ResidencyResults): Verdict[] {
  const f = figures(r);
  const failed = f.failed.awake + f.failed.asleep + f.failed.cold;
  const [asleep, cold] = [quantile(f.asleep, 0.5), quantile(f.cold, 0.5)];
  const [wake, extra] = [quantile(f.wakes, 0.5), quantile(f.extra, 0.5)];
  return [
    {
      name: "no failed request (goal 0)",
      pass: failed === 0,
      detail:
        `awake ${f.failed.awake}, asleep ${f.failed.asleep}, cold ${f.failed.cold}`,
    },
    {
      name: "a sleeping engine's first token comes before a cold start's (p50)",
      pass: asleep < cold,
      detail: `asleep ${asleep.toFixed(0)} ms, cold ${cold.toFixed(0)} ms: ${
        (cold / asleep).toFixed(1)
      }×`,
    },
    {
      name:
        "the wake the launcher reports is what a client waits more, within 100 ms (p50)",
      pass: Math.abs(extra - wake) <= 100,
      detail: `wake ${wake.toFixed(0)} ms, client-seen extra ${
        extra.toFixed(0)
      } ms`,
    },
  ];
}

/** What a reader needs beside the table. */
export function residencyNotes(r: ResidencyResults): string[] {
  const f = figures(r);
  return [
    ...(f.leftOut
      ? [
        `- ${f.leftOut} of ${r.rounds.length} rounds' awake requests were left out: the engine slept or woke between them.`,
      ]
      : []),
    `- The launcher counted ${r.sleep.sleeps} sleeps and ${r.sleep.wakes} wakes (${r.rounds.length} asked for).`,
  ];
}
