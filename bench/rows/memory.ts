/**
 * How memory reads: the launchers' VmRSS idle and after load against the
 * bare server's, the 1-engine launchers with a smaller V8 young generation
 * (and what that costs `/models` in GC work), and the memory target of issue 9.
 *
 * @module
 */
import { type LoadResults, type Rss, SEMI_SPACE } from "../phases/load.ts";
import { MANY, pick } from "../plan.ts";
import { fmt, type Row, row, type Verdict, wrkRows } from "../report/table.ts";

/** MiB the target allows per engine on top of 1.5 × the bare server. */
const PER_ENGINE_MIB = 0.5;

/** RSS rows (idle and after load) and the semi-space launchers' `/models` c=8 rows. */
export function memoryRows(load: LoadResults): Row[] {
  const many = String(MANY);
  const rows: Row[] = [];
  const { idle, loaded } = load.rss;
  for (const [when, rss] of [["idle", idle], ["after load", loaded]] as const) {
    rows.push(
      row(`RSS ${when}: bare server`, rss.bare, "MiB"),
      row(`RSS ${when}: launcher, 1 engine`, rss.one, "MiB", {
        label: "bare",
        value: rss.bare,
      }),
      row(`RSS ${when}: launcher, ${many} engines`, rss.many, "MiB", {
        label: "1 engine",
        value: rss.one,
      }),
    );
    for (const { key, flags } of SEMI_SPACE) {
      rows.push(
        row(
          `RSS ${when}: launcher, 1 engine, \`--v8-flags=${flags}\``,
          rss[key],
          "MiB",
          { label: "bare", value: rss.bare },
        ),
      );
    }
  }
  rows.push(
    row(
      `RSS: a process that only imports the launcher's modules, \`--v8-flags=${
        SEMI_SPACE[0].flags
      }\` (the runtime and code floor)`,
      load.rss.idle.floor,
      "MiB",
      { label: "bare", value: load.rss.idle.bare },
    ),
  );
  const m8 = load.models.c8;
  for (const { key, flags } of SEMI_SPACE) {
    rows.push(
      ...wrkRows(
        `launcher /models, 1 engine, c=8, \`--v8-flags=${flags}\``,
        pick(m8, key),
        { label: "default launcher c=8", runs: pick(m8, "1"), paired: true },
      ),
    );
  }
  return rows;
}

function limit(rss: Rss, engines: number): number {
  return 1.5 * rss.bare + PER_ENGINE_MIB * engines;
}

/**
 * Issue 9 §6: launcher RSS after load, 1 engine, ≤ 1.5 × the bare server
 * after the same load + 0.5 MiB per engine. The verdict is the default
 * launcher's; the detail says which configuration meets it.
 */
export function memoryTargets(load: LoadResults): Verdict[] {
  const { loaded } = load.rss;
  const bound = limit(loaded, 1);
  const configs: [string, number][] = [
    ["default", loaded.one],
    ...SEMI_SPACE.map(({ key, flags }) =>
      [`\`--v8-flags=${flags}\``, loaded[key]] as [string, number]
    ),
  ];
  const meets = configs.filter(([, v]) => v <= bound).map(([n]) => n);
  const manyBound = limit(loaded, MANY);
  return [{
    name:
      `launcher RSS after load, 1 engine ≤ 1.5 × bare after the same load + ${PER_ENGINE_MIB} MiB per engine (≤ ${
        fmt(bound, "MiB")
      }), default launcher`,
    pass: loaded.one <= bound,
    detail: `${
      configs.map(([n, v]) =>
        `${n} ${fmt(v, "MiB")} (${(v / loaded.bare).toFixed(2)}× bare)`
      ).join(", ")
    }; bare ${fmt(loaded.bare, "MiB")}; met by: ${
      meets.length ? meets.join(", ") : "none"
    }; ${MANY} engines ${fmt(loaded.many, "MiB")} vs its bound ${
      fmt(manyBound, "MiB")
    }`,
  }];
}
