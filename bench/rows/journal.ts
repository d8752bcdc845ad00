/**
 * The journal phase's rows and targets: a restart storm's wall time with the
 * journal ÷ without, and whether the journal holds every transition.
 *
 * @module
 */
import { median, PLAN } from "../plan.ts";
import { range, type Row, row, type Verdict } from "../report/table.ts";
import type { JournalResults } from "../phases/journal.ts";

/** Issue 29: the journal never slows supervision by more than this. */
const JOURNAL_TARGET_RATIO = 1.1;

function ratios(r: JournalResults): number[] {
  return r.with.map((ms, i) => ms / (r.without[i] ?? Number.NaN));
}

/** The storm's time per restart, both ways. */
export function journalRows(r: JournalResults): Row[] {
  const n = PLAN.journalRestarts;
  const per = (runs: number[]) => median(runs) / n;
  return [
    row(
      `restart storm (${n} restarts, 1 ms apart), without the journal: per restart (median of ${r.without.length})`,
      per(r.without),
      "ms",
    ),
    row(
      `the same storm, every transition journaled to logs/events.jsonl: per restart (median of ${r.with.length})`,
      per(r.with),
      "ms",
      { label: "without the journal", value: per(r.without) },
    ),
  ];
}

/** The journal costs supervision little and loses nothing. */
export function journalTargets(r: JournalResults): Verdict[] {
  const ratio = median(ratios(r));
  return [
    {
      name:
        `a restart storm with the journal ÷ without at most ${JOURNAL_TARGET_RATIO}`,
      pass: ratio <= JOURNAL_TARGET_RATIO,
      detail: `${ratio.toFixed(2)}× (rounds ${range(ratios(r))})`,
    },
    {
      name: "the journal holds every transition of every storm",
      pass: r.lines === r.expected,
      detail: `${r.lines} of ${r.expected} lines`,
    },
  ];
}
