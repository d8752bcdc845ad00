/**
 * How the load phase reads: `/health` against the bare server, `/models`
 * against the fan-out server and by engine count, the hung engine, and their
 * targets; then memory: the launchers' VmRSS idle and after load against the
 * bare server's, the 1-engine launchers with a smaller V8 young generation
 * (and what that costs `/models` in GC work), and the memory target of
 * issue 9.
 *
 * @module
 */
import { type LoadResults, type Rss, SEMI_SPACE } from "../phases/load.ts";
import {
  MANY,
  median,
  pick,
  PLAN,
  POLL_TIMEOUT_MS,
  type Runs,
} from "../plan.ts";
import {
  errorNotesOf,
  fmt,
  range,
  roundDeltas,
  roundRatios,
  type Row,
  row,
  signed,
  type Verdict,
  wrkRows,
} from "../report/table.ts";

/** Throughput, latency and hung-engine rows. */
export function loadRows(load: LoadResults): Row[] {
  const many = String(MANY);
  const fanMany = `fan${many}`;
  const { c1: h1, c8: h8 } = load.health;
  const { c1: m1, c8: m8 } = load.models;
  function paired(label: string, runs: Runs, key: string) {
    return { label, runs: pick(runs, key), paired: true };
  }
  function unpaired(label: string, runs: Runs, key: string) {
    return { label, runs: pick(runs, key), paired: false };
  }
  const rows: Row[] = [];
  for (const [c, h] of [["c=1", h1], ["c=8", h8]] as const) {
    rows.push(
      ...wrkRows(`bare \`Deno.serve\` /health ${c}`, pick(h, "bare")),
      ...wrkRows(
        `bare #2 (noise control) /health ${c}`,
        pick(h, "bare2"),
        paired(`bare ${c}`, h, "bare"),
      ),
      ...wrkRows(
        `launcher /health, 1 engine, ${c}`,
        pick(h, "one"),
        paired(`bare ${c}`, h, "bare"),
      ),
    );
  }
  rows.push(
    ...wrkRows("bare fan-out /models, 1 engine, c=1", pick(m1, "fan1")),
    ...wrkRows(
      "launcher /models, 1 engine, c=1",
      pick(m1, "1"),
      paired("fan-out 1 c=1", m1, "fan1"),
    ),
    ...wrkRows(
      "launcher /models, 8 engines, c=1",
      pick(m1, "8"),
      paired("launcher 1 engine c=1", m1, "1"),
    ),
    ...wrkRows(
      `launcher /models, ${many} engines, c=1`,
      pick(m1, many),
      paired("launcher 1 engine c=1", m1, "1"),
    ),
    ...wrkRows(
      `bare fan-out /models, ${many} engines, c=1`,
      pick(m1, fanMany),
      paired("fan-out 1 c=1", m1, "fan1"),
    ),
    ...wrkRows(
      `launcher /models, ${many} engines, c=1 vs fan-out`,
      pick(m1, many),
      paired(`fan-out ${many} c=1`, m1, fanMany),
    ),
    ...wrkRows(
      "launcher /models, 1 engine, c=8",
      pick(m8, "1"),
      unpaired("launcher /health c=8", h8, "one"),
    ),
    ...wrkRows(
      "launcher /models, 8 engines, c=8",
      pick(m8, "8"),
      paired("launcher 1 engine c=8", m8, "1"),
    ),
    ...wrkRows(
      `launcher /models, ${many} engines, c=8`,
      pick(m8, many),
      paired("launcher 1 engine c=8", m8, "1"),
    ),
  );
  const timeout = { label: "poll timeout", value: POLL_TIMEOUT_MS };
  const hung = load.hung;
  const hungWhat = "launcher /models, 1 hung + 1 healthy, c=1,";
  rows.push(
    row(`${hungWhat} p50`, hung.p50, "ms", timeout),
    row(`${hungWhat} p99`, hung.p99, "ms", timeout),
    row(`${hungWhat} max`, hung.max, "ms", timeout),
    row(
      `${hungWhat} answers in ${PLAN.hungSeconds} s`,
      hung.requests,
      "requests",
      {
        label: `${PLAN.hungSeconds} s / poll timeout`,
        value: Math.floor(PLAN.hungSeconds * 1000 / POLL_TIMEOUT_MS),
      },
    ),
  );
  return rows;
}

/** `/health` against bare, `/models` by engine count, the hung engine. */
export function loadTargets(load: LoadResults): Verdict[] {
  const many = String(MANY);
  const targets: Verdict[] = [];
  for (
    const [name, runs] of [["c=1", load.health.c1], [
      "c=8",
      load.health.c8,
    ]] as const
  ) {
    const ratios = roundRatios(pick(runs, "one"), pick(runs, "bare"), "rps");
    const control = roundRatios(pick(runs, "bare2"), pick(runs, "bare"), "rps");
    const ratio = median(ratios);
    targets.push({
      name: `/health throughput within 10% of bare at ${name} (ratio ≥ 0.90)`,
      pass: ratio >= 0.9,
      detail: `ratio ${ratio.toFixed(2)} (rounds ${range(ratios)}); ` +
        `noise floor, bare #2 vs bare: ${median(control).toFixed(2)} (rounds ${
          range(control)
        })`,
    });
  }
  const m1 = load.models.c1;
  const deltas = roundDeltas(pick(m1, many), pick(m1, "1"), "p50");
  const delta = median(deltas);
  const fanDelta = median(
    roundDeltas(pick(m1, `fan${many}`), pick(m1, "fan1"), "p50"),
  );
  targets.push({
    name: `/models p50 with ${many} engines ≤ 1 engine + 5 ms at c=1`,
    pass: delta <= 5,
    detail: `${signed(delta, "ms")} (rounds ${
      deltas.map((d) => d.toFixed(2)).join(", ")
    } ms); bare fan-out ${many} vs 1: ${signed(fanDelta, "ms")}`,
  });
  const hung = load.hung;
  const bound = POLL_TIMEOUT_MS + 1_000;
  targets.push({
    name:
      `/models with a hung engine stays bounded (every answer ≤ ${bound} ms, no timeouts)`,
    pass: hung.requests > 0 && hung.errors.timeout === 0 && hung.max <= bound,
    detail: `${hung.requests} answers in ${PLAN.hungSeconds} s, max ${
      fmt(hung.max, "ms")
    }, ${hung.errors.timeout} timeouts`,
  });
  return targets;
}

/** Notes on wrk errors during the load phase. */
export function loadNotes(load: LoadResults): string[] {
  return errorNotesOf([
    ["/health c=1", load.health.c1],
    ["/health c=8", load.health.c8],
    ["/models c=1", load.models.c1],
    ["/models c=8", load.models.c8],
  ]);
}

// ---------------------------------------------------------------------------
// Memory

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
