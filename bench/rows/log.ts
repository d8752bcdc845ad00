/**
 * The log phase's rows and target: an engine's output through the launcher
 * into its log ÷ straight to a file (and through a plain pipe), and whether
 * the log holds every byte.
 *
 * @module
 */

import { median, PLAN } from "../plan.ts";
import { fmt, range, type Row, row, type Verdict } from "../report/table.ts";
import type { FloodRun, LogResults } from "../phases/log.ts";

/** Issue 8 §4: through the launcher ÷ straight to a file. */
const LOG_TARGET_RATIO = 1.2;

function med(runs: readonly FloodRun[], key: keyof FloodRun): number {
  return median(runs.map((r) => r[key]));
}

function ratiosTo(
  runs: readonly FloodRun[],
  base: readonly FloodRun[],
  key: keyof FloodRun,
): number[] {
  return runs.map((r, i) => r[key] / (base[i]?.[key] ?? Number.NaN));
}

function ratios(results: LogResults, key: keyof FloodRun): number[] {
  return ratiosTo(results.launcher, results.direct, key);
}

/** Wall times both ways, and what the launcher's log holds. */
export function logRows(results: LogResults): Row[] {
  const { launcher, direct } = results;
  const mb = PLAN.logBytes / 1e6;
  const n = `median of ${launcher.length}`;
  const missing = launcher.map((r) => PLAN.logBytes - r.bytes);
  return [
    row(
      `${mb} MB of engine stdout straight to a file: engine's own time (${n})`,
      med(direct, "engineMs"),
      "ms",
    ),
    row(
      `${mb} MB of engine stdout through the launcher into logs/: engine's own time (${n})`,
      med(launcher, "engineMs"),
      "ms",
      { label: "straight to a file", value: med(direct, "engineMs") },
    ),
    row(
      `${mb} MB of engine stdout through a pipe to \`cat > file\` (any pipe's floor): engine's own time (${n})`,
      med(results.pipe, "engineMs"),
      "ms",
      { label: "straight to a file", value: med(direct, "engineMs") },
    ),
    row(
      `${mb} MB of engine stdout read and discarded by a bare Deno process (Deno's floor for a child's pipe): engine's own time (${n})`,
      med(results.drain, "engineMs"),
      "ms",
      { label: "straight to a file", value: med(direct, "engineMs") },
    ),
    row(
      `${mb} MB through the launcher vs read and discarded by bare Deno: engine's own time (${n})`,
      med(launcher, "engineMs"),
      "ms",
      { label: "bare Deno drain", value: med(results.drain, "engineMs") },
    ),
    row(
      `${mb} MB through the launcher vs through \`cat\`: engine's own time (${n})`,
      med(launcher, "engineMs"),
      "ms",
      { label: "through cat", value: med(results.pipe, "engineMs") },
    ),
    row(
      `${mb} MB straight to a file: spawn → done line (${n})`,
      med(direct, "outsideMs"),
      "ms",
    ),
    row(
      `${mb} MB through the launcher: engine spawn → every byte in the log (${n})`,
      med(launcher, "outsideMs"),
      "ms",
      { label: "straight to a file", value: med(direct, "outsideMs") },
    ),
    row(
      `${mb} MB through the launcher: engine output bytes in the log (fewest of ${launcher.length})`,
      Math.min(...launcher.map((r) => r.bytes)),
      "bytes",
      { label: "written", value: PLAN.logBytes },
    ),
    row(
      `${mb} MB through the launcher: bytes missing / reported lost (most of ${launcher.length})`,
      Math.max(...missing),
      "bytes",
      {
        label: "reported lost",
        value: Math.max(...launcher.map((r) => r.lost)),
      },
    ),
    row(
      `${mb} MB straight to a file: throughput (${n})`,
      PLAN.logBytes / 1e3 / med(direct, "engineMs"),
      "MB/s",
    ),
    row(
      `${mb} MB through the launcher: throughput (${n})`,
      PLAN.logBytes / 1e3 / med(launcher, "engineMs"),
      "MB/s",
      {
        label: "straight to a file",
        value: PLAN.logBytes / 1e3 / med(direct, "engineMs"),
      },
    ),
  ];
}

/** Through the launcher ÷ straight to a file ≤ 1.2×; nothing lost. */
export function logTargets(results: LogResults): Verdict[] {
  const engine = ratios(results, "engineMs");
  const outside = ratios(results, "outsideMs");
  const ratio = median(engine);
  const complete = results.launcher.every((r) =>
    r.bytes === PLAN.logBytes && r.lost === 0
  );
  return [
    {
      name:
        `log flood: through the launcher ÷ straight to a file, the engine's wall time for ${
          PLAN.logBytes / 1e6
        } MB (ratio ≤ ${LOG_TARGET_RATIO})`,
      pass: ratio <= LOG_TARGET_RATIO,
      detail: `ratio ${ratio.toFixed(2)} (rounds ${range(engine)}; ${
        fmt(med(results.launcher, "engineMs"), "ms")
      } vs ${
        fmt(med(results.direct, "engineMs"), "ms")
      }); seen from outside, spawn → all bytes in the file: ${
        median(outside).toFixed(2)
      } (rounds ${
        range(outside)
      }); a plain pipe to \`cat > file\` ÷ straight to a file: ${
        median(ratiosTo(results.pipe, results.direct, "engineMs")).toFixed(2)
      }, launcher ÷ that pipe: ${
        median(ratiosTo(results.launcher, results.pipe, "engineMs")).toFixed(2)
      }; a bare Deno process draining the pipe ÷ straight to a file: ${
        median(ratiosTo(results.drain, results.direct, "engineMs")).toFixed(2)
      }, launcher ÷ that drain: ${
        median(ratiosTo(results.launcher, results.drain, "engineMs")).toFixed(2)
      }`,
    },
    {
      name: "log flood: the launcher's log holds every byte the engine wrote",
      pass: complete,
      detail: results.launcher.map((r, i) =>
        `round ${
          i + 1
        }: ${r.bytes} of ${PLAN.logBytes} bytes, ${r.lost} reported lost`
      ).join("; "),
    },
  ];
}
