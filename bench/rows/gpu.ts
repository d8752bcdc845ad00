/**
 * The GPU lifecycle phase's rows, targets and notes: the gate's cost with no
 * pool as this tree ÷ the tree before the gate, judged against an A/A control
 * run in the same rotation, and `nvidia-smi` queries and launcher CPU per
 * health round.
 *
 * @module
 */
import {
  BEFORE_GATE,
  type GpuResults,
  type RoundWindow,
} from "../phases/gpu.ts";
import { MANY, PLAN } from "../plan.ts";
import { fmt, type Row, row, type Verdict } from "../report/table.ts";
import { comparisonRows, KINDS, noiseVerdict, WHAT } from "./tree_compare.ts";

/** The method, for the report's Method paragraph. */
export const GPU_METHOD = [
  `GPU lifecycle: ${PLAN.gateRounds} rotating rounds of three ${MANY}-engine launchers with no GPU pool`,
  `(\`--gpus none\`, no \`nvidia-smi\` on PATH): this tree, the tree before the GPU start gate (commit ${BEFORE_GATE},`,
  `exported by \`git archive\` and run with this tree's deno.json) and this tree again (the A/A control),`,
  `with stand-in engines, then with sleep-like ones (the launcher's own start-up); the launcher's CPU is its`,
  `process's utime + stime (engines excluded) read when "listening on" arrives;`,
  `ratios are medians of per-round ratios, and "within noise" means |now ÷ before − 1| is no larger than the`,
  `A/A control's largest per-round |ratio − 1|. Health rounds: stand-in engines on one fake GPU each`,
  `(\`--gpus 0-${
    PLAN.gpuEngines - 1
  }\`, \`--health-interval ${PLAN.gpuIntervalSeconds}\`), the stand-in \`nvidia-smi\``,
  `(tests/fixtures/nvidia_smi.ts) on PATH or none; from two rounds after every engine is healthy, a window of`,
  `~${PLAN.gpuWindowSeconds} s from the end of one round to the end of another; rounds are counted exactly as`,
  `rewrites of the metrics file (once every engine is up the launcher rewrites it once a round and on nothing else),`,
  `queries as the stand-in's logged \`--query-compute-apps\` calls, CPU as utime + stime of the launcher process`,
  `alone (\`/proc/<pid>/stat\`, its \`nvidia-smi\` children excluded) over the window's rounds.`,
].join(" ");

function perRound(w: RoundWindow): number {
  return w.queries / w.rounds;
}

function cpuMsPerRound(w: RoundWindow): number {
  return w.cpu * 1000 / w.rounds;
}

function windowText(w: RoundWindow): string {
  return `${w.queries} queries in ${w.rounds} rounds, ${
    (w.ms / 1000).toFixed(1)
  } s`;
}

function roundRows(r: GpuResults): Row[] {
  const n = PLAN.gpuEngines;
  const interval = PLAN.gpuIntervalSeconds * 1000;
  return [
    row(
      `health round, ${n} engines on ${n} fake GPUs: \`nvidia-smi --query-compute-apps\` calls per round (${
        windowText(r.eight)
      })`,
      perRound(r.eight),
      "per round",
      { label: "one a round", value: 1 },
    ),
    row(
      `health round, 2 engines on fake GPUs: \`--query-compute-apps\` calls per round (${
        windowText(r.two)
      })`,
      perRound(r.two),
      "per round",
      { label: `${n} engines`, value: perRound(r.eight) },
    ),
    row(
      `health rounds in the ${n}-engine window, counted (metrics rewrites)`,
      r.eight.rounds,
      "count",
      {
        label: `elapsed ÷ ${PLAN.gpuIntervalSeconds} s`,
        value: r.eight.ms / interval,
      },
    ),
    row(
      `health round, ${n} engines on fake GPUs, stand-in \`nvidia-smi\`: launcher CPU per round (${r.eight.rounds} rounds)`,
      cpuMsPerRound(r.eight),
      "ms",
      {
        label: `no \`nvidia-smi\` on PATH (${r.bare.rounds} rounds)`,
        value: cpuMsPerRound(r.bare),
      },
    ),
    row(
      `health round, 2 engines on fake GPUs, stand-in \`nvidia-smi\`: launcher CPU per round (${r.two.rounds} rounds)`,
      cpuMsPerRound(r.two),
      "ms",
      { label: `${n} engines`, value: cpuMsPerRound(r.eight) },
    ),
    row(
      "stand-in `nvidia-smi`: one query (both runs at once, as the launcher asks; median of 3)",
      r.standInMs,
      "ms",
    ),
  ];
}

/** Every row of the phase. */
export function gpuRows(r: GpuResults): Row[] {
  const gate = r.gate
    ? comparisonRows(r.gate, "GPU gate idle", "before the gate", [
      "listen",
      "healthy",
      "cpu",
    ])
    : [];
  return [...gate, ...roundRows(r)];
}

/** Within noise with no pool; at most one query a health round, whatever the engine count. */
export function gpuTargets(r: GpuResults): Verdict[] {
  const verdicts: Verdict[] = [];
  const gate = r.gate;
  if (gate) {
    for (const kind of KINDS) {
      for (
        const key of kind.keys.filter((k) => k !== "rss" && k !== "models")
      ) {
        verdicts.push(
          noiseVerdict(
            gate[kind.arms],
            key,
            `the GPU gate costs nothing when it has nothing to do: ${kind.engines}, no pool, ${
              WHAT[key]
            }, this tree ÷ ${gate.commit} within the A/A noise`,
          ),
        );
      }
    }
  }
  verdicts.push({
    name:
      "one `nvidia-smi` query per health round serves every engine: `--query-compute-apps` calls per round ≤ 1 with 8 engines and with 2",
    pass: perRound(r.eight) <= 1 && perRound(r.two) <= 1,
    detail: `${PLAN.gpuEngines} engines: ${perRound(r.eight).toFixed(2)} (${
      windowText(r.eight)
    }); 2 engines: ${perRound(r.two).toFixed(2)} (${
      windowText(r.two)
    }); one query per engine would be ${PLAN.gpuEngines}.00 and 2.00`,
  });
  verdicts.push({
    name: "the GPU phase leaves no process behind",
    pass: r.leftovers === 0,
    detail:
      `${r.leftovers} process(es) naming the fake GPU ledger after every launcher had stopped`,
  });
  return verdicts;
}

/** Why a row is missing, and what the query count means. */
export function gpuNotes(r: GpuResults): string[] {
  const notes: string[] = [];
  if (r.skipped) {
    notes.push(
      `- GPU gate idle rows skipped: the tree before the gate (${BEFORE_GATE}) is not available: ${r.skipped}.`,
    );
  }
  const half = PLAN.gpuIntervalSeconds * 500;
  if (perRound(r.eight) < 0.9 || perRound(r.two) < 0.9) {
    notes.push(
      `- Fewer queries than rounds: a round reuses the previous answer when it is younger than half an interval (${half} ms), ` +
        `which happens when a query takes longer than that (the stand-in, a Deno process per run, takes ${
          fmt(r.standInMs, "ms")
        } here); a real \`nvidia-smi\` at the default 10 s interval asks once a round.`,
    );
  }
  return notes;
}
