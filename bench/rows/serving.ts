/**
 * The serving phase's rows: `/models`, `/health` and the launcher's CPU per
 * health round at 8 and 32 engines, this tree ÷ the tree before issue 36,
 * beside the A/A control; the time from a wedge to `stalled`.
 *
 * @module
 */
import {
  BEFORE_SERVING,
  SERVING_CPU_WINDOW_S,
  SERVING_HEALTH_ASKS,
  SERVING_INTERVAL_S,
  SERVING_MODELS_ASKS,
  SERVING_ROUNDS,
  SERVING_SIZES,
  type ServingResults,
  type ServingSample,
} from "../phases/serving.ts";
import { median } from "../plan.ts";
import { type Row, row } from "../report/table.ts";

/** The method, for the report's Method paragraph. */
export const SERVING_METHOD = [
  `Serving: ${SERVING_ROUNDS} rotating rounds per size (8 and 32 engines) of three launchers: this tree, the tree`,
  `before issue 36's wiring (commit ${BEFORE_SERVING}) and this tree again (the A/A control); stand-in engines serving`,
  `vLLM's /metrics text padded to about 100 KB; --health-interval ${SERVING_INTERVAL_S} (ten times the default's rounds);`,
  `${SERVING_MODELS_ASKS} sequential /models and ${SERVING_HEALTH_ASKS} sequential /health per launcher (medians); the launcher's CPU`,
  `over ${SERVING_CPU_WINDOW_S} s idle, per second, that is per round. Wedge: one stand-in wedged 4 s after its start, with`,
  `--health-interval 0.5 --stall-timeout 2 (under load: 2 streams) or --canary-interval 2 --canary-timeout 1 (idle,`,
  `its running gauge at 0); the wedge to the journal's \`→ stopping\` (stalled).`,
].join(" ");

function spread(
  runs: ServingSample[],
  base: ServingSample[],
  key: keyof ServingSample,
): string {
  const r = runs.map((s, i) => s[key] / base[i]![key]);
  return `${Math.min(...r).toFixed(2)}–${Math.max(...r).toFixed(2)}`;
}

const MEASURES: [keyof ServingSample, string][] = [
  ["models", "GET /models"],
  ["health", "GET /health"],
  ["cpuPerRound", "launcher CPU per health round"],
];

/** Every row of the phase. */
export function servingRows(r: ServingResults): Row[] {
  const rows = SERVING_SIZES.flatMap((n) => {
    const s = r.samples[n]!;
    return MEASURES.map(([key, what]) =>
      row(
        `serving, ${n} engines: ${what} (rounds ${
          spread(s.now, s.before, key)
        }; A/A ${spread(s.again, s.now, key)})`,
        median(s.now.map((x) => x[key])),
        "ms",
        {
          label: `before ${r.commit}`,
          value: median(s.before.map((x) => x[key])),
        },
      )
    );
  });
  return [
    ...rows,
    row(
      "serving: wedge under load → stalled (--stall-timeout 2)",
      r.stallMs,
      "ms",
    ),
    row(
      "serving: idle wedge, gauge 0 → stalled (two canaries)",
      r.canaryMs,
      "ms",
    ),
  ];
}

/** The defaults, computed. */
export function servingNotes(): string[] {
  return [
    "- Wedge → `stalled` with the defaults (computed): under load 300–312 s (--stall-timeout 300, then up to one --health-interval 10 and the 2 s read); idle, at most about 300 + 2×10 + 2×30 s ≈ 6.3 min (--canary-interval, two rounds, two --canary-timeout).",
  ];
}
