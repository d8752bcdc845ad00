/**
 * The residency phase's rows, launcher-woken half: what a client of three
 * vLLM stand-in cards at 1.25× one GPU feels (failed requests, out-of-memory
 * events, the first token of a request that found its engine asleep, against
 * the engine's own wake) and where each switch's time goes, by the launcher's
 * journal and the timed stand-in `nvidia-smi` runs.
 *
 * @module
 */
import { median, quantile } from "../plan.ts";
import { type Row, row, type Verdict } from "../report/table.ts";
import {
  AWAKE_MIB,
  AWAKE_SAMPLES,
  CLIENTS,
  DEVICE_MIB,
  type JournalLine,
  LOAD_MS,
  ONE_CLIENT_REQUESTS,
  REQUESTS,
  RESIDUE_MIB,
  SLEEP_AFTER_S,
  SLEEP_MS,
  type SmiRun,
  type SwitchRequest,
  type SwitchRound,
  TOKEN_MS,
  TOKENS,
  type VllmResidencyResults,
  WAKE_MS,
} from "../phases/residency_vllm.ts";

/** The goal: a switch adds at most this over the engine's own wake (p50). */
export const ADDED_GOAL_MS = 500;

/** The method, for the section's first paragraph. */
export function residencyVllmMethod(r: VllmResidencyResults): string {
  return [
    `The launcher CLI (\`deno run -A mod.ts a b c --gpus 0\`, default health interval) over three cards of`,
    `the vLLM stand-in (tests/fixtures/vllm_stand_in.ts, built from vLLM's source: a request to a sleeping engine parks`,
    `and counts in \`/load\`; a wake past the device's memory answers 500 out of memory) on one stand-in GPU of`,
    `${
      DEVICE_MIB / 1024
    } GiB (tests/support/fake_gpus.ts: a ledger and a stand-in \`nvidia-smi\`, itself a Deno`,
    `program, run through a wrapper that times each run). Each card: \`engine: vllm\`, \`gpu_memory: ${
      AWAKE_MIB / 1024
    }GiB\`,`,
    `\`sleep_after: ${SLEEP_AFTER_S}\` (engines sleep only to make room during the round), awake ${AWAKE_MIB} MiB`,
    `(three: ${
      ((3 * AWAKE_MIB) / DEVICE_MIB).toFixed(2)
    }× the device), residue ${RESIDUE_MIB} MiB, load ${LOAD_MS} ms,`,
    `sleep ${SLEEP_MS} ms, **wake ${WAKE_MS} ms** (\`--fake-wake-ms\`: the engine's own wake), ${TOKENS} tokens`,
    `of ${TOKEN_MS} ms; no engine key (the released builds' dev routes answer without it: the probe would turn`,
    `launcher-driven sleep off). First ${AWAKE_SAMPLES} streamed and ${AWAKE_SAMPLES} plain requests to an awake engine`,
    `(${r.awakeCard}) one after another: the awake baseline. Then two rounds of requests in the order \`a b c a b c …\`,`,
    `each starting at the sleeper, every other one streamed: ${ONE_CLIENT_REQUESTS} from one client (each finds its`,
    `engine asleep and nothing else in flight), then the benchmark's ${REQUESTS} from ${CLIENTS} clients`,
    `at once (each takes the next request when its last one ends: one client's stream is in flight while the other's`,
    `request wakes its engine, and while one client's request is parked the other goes on through the awake engines).`,
    `Each is sent straight to its engine's port, after an untimed \`GET /is_sleeping\` that says whether it will park.`,
    `First token: send to the first chunk with content; a plain request's is its whole answer. Client-seen extra:`,
    `a request that found its engine asleep, less the awake p50 of its kind. The launcher's switch: its journal's`,
    `\`switch\` line (the parked request seen in \`/load\` to the wake's answer); its wake: the \`woken\` line`,
    `(\`/wake_up\` sent to its answer). Where the time goes, per switch, by the journal's times (ms): detection`,
    `(send to the \`waking\` state), room (\`waking\` to \`/wake_up\` sent; its \`nvidia-smi\` share is the wall time`,
    `of the runs within it), wake, and the wake's end to the first token. Out of memory: \`wake-failed\` lines,`,
    `the engines' \`CUDA Error: out of memory\` lines, and the device's use by the ledger every 20 ms against its`,
    `total. p95 is the nearest rank. **These are stand-in figures on 2 shared CPU cores with no GPU, not GPU figures.**`,
  ].join(" ");
}

const ms = (xs: readonly { ms: number; ok: boolean }[]) =>
  xs.filter((x) => x.ok).map((x) => x.ms);
const wall = (at: string) => Date.parse(at);
const secondsIn = (detail: string | undefined) => {
  const m = /\bin (\d+(?:\.\d+)?) s\b/.exec(detail ?? "");
  return m ? Number(m[1]) * 1000 : undefined;
};
const p50 = (xs: readonly number[]) => quantile(xs, 0.5);
const p95 = (xs: readonly number[]) => quantile(xs, 0.95);

/** The wake a request that found its engine asleep waited for, by the journal and the `nvidia-smi` runs. */
export interface Switch {
  request: SwitchRequest;
  /** Sent while that engine's switch was already under way (another request parked first). */
  joined: boolean;
  /** Send to the `waking` state (NaN when joined). */
  detection: number;
  /** `waking` to `/wake_up` sent (NaN when joined). */
  room: number;
  /** The wall time of `nvidia-smi` runs within the room. */
  smi: number;
  wake: number;
  /** The wake's end to the first token (a streamed request; NaN for a plain one). */
  after: number;
  /** Its `wake-waits` reasons. */
  waits: string[];
}

/** The union of the runs' wall time inside [from, to]. */
function smiWithin(runs: readonly SmiRun[], from: number, to: number): number {
  const spans = runs
    .map((r) => [Math.max(r.start, from), Math.min(r.end, to)] as const)
    .filter(([a, b]) => b > a)
    .sort((x, y) => x[0] - y[0]);
  let [sum, end] = [0, -Infinity];
  for (const [a, b] of spans) {
    if (b <= end) continue;
    sum += b - Math.max(a, end);
    end = b;
  }
  return sum;
}

/** Each request of `round` that found its engine asleep, matched to the wake it waited for. */
export function switches(
  r: VllmResidencyResults,
  round: SwitchRound,
): Switch[] {
  const out: Switch[] = [];
  for (const request of round.requests) {
    if (request.asleep !== true || !request.got.ok) continue;
    const firstAt = request.sentAt + request.got.ms;
    const lines = r.journal.filter((e) => e.model === request.model);
    const woken = lines.find((e) =>
      e.reason === "woken" && wall(e.at) >= request.sentAt - 5 &&
      wall(e.at) <= firstAt + 5
    );
    const wake = secondsIn(woken?.detail);
    if (!woken || wake === undefined) continue;
    const wokenAt = wall(woken.at);
    const waking = lines.findLast((e) =>
      e.event === "state" && e.to === "waking" && wall(e.at) <= wokenAt
    );
    if (!waking) continue;
    const wakingAt = wall(waking.at);
    const joined = wakingAt < request.sentAt - 5;
    const sentWake = wokenAt - wake;
    out.push({
      request,
      joined,
      detection: joined ? Number.NaN : wakingAt - request.sentAt,
      room: joined ? Number.NaN : sentWake - wakingAt,
      smi: joined ? Number.NaN : smiWithin(r.smi, wakingAt, sentWake),
      wake,
      after: request.stream ? firstAt - wokenAt : Number.NaN,
      waits: lines.filter((e) =>
        e.reason === "wake-waits" && wall(e.at) >= wakingAt &&
        wall(e.at) <= wokenAt
      ).map((e) => e.detail ?? ""),
    });
  }
  return out;
}

/** The journal's lines with `reason` within the round (and 0.5 s after). */
function linesIn(
  r: VllmResidencyResults,
  round: SwitchRound,
  reason: string,
): JournalLine[] {
  return r.journal.filter((e) =>
    e.reason === reason && wall(e.at) >= round.from &&
    wall(e.at) <= round.to + 500
  );
}

/** One round's figures. */
function roundFigures(r: VllmResidencyResults, round: SwitchRound) {
  const awakeStream = ms(r.awake.stream);
  const awakePlain = ms(r.awake.plain);
  const base = (q: SwitchRequest) =>
    median(q.stream ? awakeStream : awakePlain);
  const asleep = round.requests.filter((q) => q.asleep === true && q.got.ok);
  const switched = switches(r, round);
  const own = switched.filter((s) => !s.joined);
  const waits = linesIn(r, round, "wake-waits");
  const busy = (e: JournalLine) =>
    (e.detail?.match(/\b\w+ busy\b/g) ?? []).length;
  return {
    base,
    label: round.clients === 1 ? "1 client" : `${round.clients} clients`,
    clients: round.clients,
    asleepStream: asleep.filter((q) => q.stream).map((q) => q.got.ms),
    extra: asleep.map((q) => q.got.ms - base(q)),
    asleep: asleep.length,
    awakeAtSend: round.requests.filter((q) => q.asleep === false).length,
    failed: round.requests.filter((q) => !q.got.ok),
    launcherSwitch: linesIn(r, round, "switch").flatMap((e) =>
      secondsIn(e.detail) ?? []
    ),
    launcherWake: linesIn(r, round, "woken").flatMap((e) =>
      secondsIn(e.detail) ?? []
    ),
    switched,
    own,
    clean: own.filter((s) => s.waits.length === 0),
    waited: own.filter((s) => s.waits.length > 0),
    joined: switched.filter((s) => s.joined),
    waits,
    // At most `clients - 1` other requests are in flight, and an engine
    // awake (the only candidates) holds its awake footprint: more busy
    // engines, or one that "frees nothing", were read from a stale figure.
    staleBusy: waits.filter((e) => busy(e) > round.clients - 1).length,
    staleHolds: waits.filter((e) => /frees nothing/.test(e.detail ?? ""))
      .length,
    /** Seconds between one `made-room` line and the next. */
    roomGaps: linesIn(r, round, "made-room").map((e) => wall(e.at))
      .map((at, i, all) => i ? (at - all[i - 1]!) / 1000 : Number.NaN)
      .filter(Number.isFinite),
  };
}

type RoundFigures = ReturnType<typeof roundFigures>;

/** The figures over both rounds. */
function figures(r: VllmResidencyResults) {
  const rounds = r.rounds.map((round) => roundFigures(r, round));
  const all = (reason: string) =>
    r.journal.filter((e) =>
      e.reason === reason && wall(e.at) >= r.rounds[0]!.from
    );
  const from = r.rounds[0]?.from ?? 0;
  const to = r.rounds.at(-1)?.to ?? 0;
  return {
    rounds,
    /** The benchmark's round: the last one (`CLIENTS` clients). */
    main: rounds.at(-1)!,
    awakeStream: ms(r.awake.stream),
    awakePlain: ms(r.awake.plain),
    launcherWake: all("woken").flatMap((e) => secondsIn(e.detail) ?? []),
    failed: rounds.reduce((n, f) => n + f.failed.length, 0),
    requests: r.rounds.reduce((n, round) => n + round.requests.length, 0),
    wakeFailed: all("wake-failed").length,
    madeRoom: all("made-room").length,
    smiMs: r.smi.filter((s) => s.start >= from && s.end <= to)
      .map((s) => s.end - s.start),
  };
}

function parts(switched: readonly Switch[], q: number) {
  const at = (pick: (s: Switch) => number) =>
    quantile(switched.map(pick).filter(Number.isFinite), q);
  return {
    detection: at((s) => s.detection),
    room: at((s) => s.room),
    smi: at((s) => s.smi),
    wake: at((s) => s.wake),
    after: at((s) => s.after),
  };
}

function roundRows(f: RoundFigures, requests: number): Row[] {
  const wake = { label: "engine's wake", value: WAKE_MS };
  const p = parts(f.own, 0.5);
  const l = f.label;
  return [
    row(
      `${l}: switch, client-seen: first token of a streamed request to a sleeper, p50 (${f.asleepStream.length})`,
      p50(f.asleepStream),
      "ms",
      wake,
    ),
    row(`${l}: the same, p95`, p95(f.asleepStream), "ms", wake),
    row(
      `${l}: switch, client-seen extra over awake, all kinds, p50 (${f.extra.length} of ${requests} requests found their engine asleep)`,
      p50(f.extra),
      "ms",
      wake,
    ),
    row(`${l}: the same, p95`, p95(f.extra), "ms", wake),
    row(
      `${l}: the same, switches that found room at once, p50 (${f.clean.length})`,
      p50(f.clean.map((s) => s.request.got.ms - f.base(s.request))),
      "ms",
      wake,
    ),
    row(
      `${l}: switch, the launcher's (\`switch\` lines), p50 (${f.launcherSwitch.length})`,
      p50(f.launcherSwitch),
      "ms",
      { label: "its wake p50", value: p50(f.launcherWake) },
    ),
    row(`${l}: the same, p95`, p95(f.launcherSwitch), "ms", {
      label: "its wake p95",
      value: p95(f.launcherWake),
    }),
    row(
      `${l}: per switch, p50 of ${f.own.length}: send → \`waking\` (detection)`,
      p.detection,
      "ms",
    ),
    row(
      `${l}: per switch, p50: \`waking\` → \`/wake_up\` sent (room)`,
      p.room,
      "ms",
    ),
    row(`${l}: per switch, p50: of which \`nvidia-smi\` runs`, p.smi, "ms"),
    row(
      `${l}: per switch, p50: \`/wake_up\` → its answer (wake)`,
      p.wake,
      "ms",
      wake,
    ),
    row(
      `${l}: per switch, p50: the wake's end → first token (streamed)`,
      p.after,
      "ms",
    ),
    row(
      `${l}: switches that waited for room (\`wake-waits\`)`,
      f.waited.length,
      "count",
    ),
  ];
}

export function residencyVllmRows(r: VllmResidencyResults): Row[] {
  const f = figures(r);
  return [
    row(
      `first token awake, streamed, p50 (${f.awakeStream.length} samples)`,
      p50(f.awakeStream),
      "ms",
    ),
    row("first token awake, streamed, p95", p95(f.awakeStream), "ms"),
    row(
      `answer awake, plain (${TOKENS} tokens), p50 (${f.awakePlain.length} samples)`,
      p50(f.awakePlain),
      "ms",
    ),
    row(
      `wake the launcher measured (\`woken\` lines), p50 (${f.launcherWake.length})`,
      p50(f.launcherWake),
      "ms",
      { label: "engine's wake", value: WAKE_MS },
    ),
    ...f.rounds.flatMap((round, i) =>
      roundRows(round, r.rounds[i]!.requests.length)
    ),
    row(
      `stand-in \`nvidia-smi\` run during the rounds, p50 (${f.smiMs.length} runs)`,
      p50(f.smiMs),
      "ms",
    ),
    row("stand-in `nvidia-smi` run, p95", p95(f.smiMs), "ms"),
    row("engines put to sleep to make room (`made-room`)", f.madeRoom, "count"),
    row(`failed requests (of ${f.requests})`, f.failed, "requests"),
    row("wakes that failed (`wake-failed`)", f.wakeFailed, "count"),
    row("engines' out-of-memory lines", r.oomLines, "count"),
    row(
      `device use by the ledger, peak (${r.ledger.samples} samples)`,
      r.ledger.peakMib,
      "MiB",
      { label: "total", value: DEVICE_MIB },
    ),
    row("ledger samples past the device's total", r.ledger.overTotal, "count"),
  ];
}

/** None failed, none out of memory, and a switch adds at most 0.5 s over the engine's wake (p50). */
export function residencyVllmTargets(r: VllmResidencyResults): Verdict[] {
  const f = figures(r);
  const oom = f.wakeFailed + r.oomLines + r.ledger.overTotal;
  const added = (g: RoundFigures): Verdict[] => {
    const extra = p50(g.extra);
    const [launcher, wake] = [p50(g.launcherSwitch), p50(g.launcherWake)];
    const room = p50(g.own.map((s) => s.room));
    return [
      {
        name:
          `${g.label}: a switch adds at most ${ADDED_GOAL_MS} ms to the engine's own wake, client-seen (p50)`,
        pass: extra - WAKE_MS <= ADDED_GOAL_MS,
        detail: `client-seen extra ${
          extra.toFixed(0)
        } ms, wake ${WAKE_MS} ms: +${(extra - WAKE_MS).toFixed(0)} ms`,
      },
      {
        name:
          `${g.label}: a switch adds at most ${ADDED_GOAL_MS} ms to the wake it measured, launcher-seen (p50)`,
        pass: launcher - wake <= ADDED_GOAL_MS,
        detail: `switch ${launcher.toFixed(0)} ms, wake ${
          wake.toFixed(0)
        } ms: +${(launcher - wake).toFixed(0)} ms`,
      },
      {
        name:
          `${g.label}: a parked request seen to its \`/wake_up\` within 500 ms (p50)`,
        pass: room <= 500,
        detail: `${room.toFixed(0)} ms`,
      },
    ];
  };
  return [
    {
      name: "no failed request (goal 0)",
      pass: f.failed === 0,
      detail: `${f.failed} of ${f.requests}${
        f.failed
          ? `: ${
            [
              ...new Set(
                f.rounds.flatMap((g) => g.failed.map((q) => q.got.error)),
              ),
            ].join("; ")
          }`
          : ""
      }`,
    },
    {
      name: "no out-of-memory event (goal 0)",
      pass: oom === 0,
      detail:
        `wake-failed ${f.wakeFailed}, out-of-memory lines ${r.oomLines}, ledger past ${DEVICE_MIB} MiB in ${r.ledger.overTotal} of ${r.ledger.samples} samples (peak ${r.ledger.peakMib} MiB)`,
    },
    ...added(f.main),
    ...f.rounds.filter((g) => g !== f.main).flatMap(added),
  ];
}

function waitReasons(f: RoundFigures): string {
  const counts = new Map<string, number>();
  for (const e of f.waits) {
    const kind = (e.detail ?? "").replace(/^its wake waits for /, "")
      .replace(
        /^room on GPU \d+: needs \d+ MiB more, \d+ MiB can be freed /,
        "",
      )
      .replace(/\b[a-c]\b/g, "x")
      .replace(/\d+(?:\.\d+)?/g, "#");
    counts.set(kind, (counts.get(kind) ?? 0) + 1);
  }
  return [...counts].sort((a, b) => b[1] - a[1])
    .map(([k, n]) => `${n}× ${k}`).join(", ");
}

/** What a reader needs beside the table: where the time goes. */
export function residencyVllmNotes(r: VllmResidencyResults): string[] {
  const f = figures(r);
  const fmt = (x: number) => Number.isFinite(x) ? `${x.toFixed(0)}` : "n/a";
  const line = (label: string, set: readonly Switch[]) => {
    const [a, b] = [parts(set, 0.5), parts(set, 0.95)];
    return `  - ${label} (${set.length}): detection ${fmt(a.detection)} (p95 ${
      fmt(b.detection)
    }), room ${fmt(a.room)} (p95 ${fmt(b.room)}), of which \`nvidia-smi\` ${
      fmt(a.smi)
    } (p95 ${fmt(b.smi)}), wake ${fmt(a.wake)} (p95 ${
      fmt(b.wake)
    }), to the first token ${fmt(a.after)} (p95 ${fmt(b.after)}).`;
  };
  const rounds = f.rounds.flatMap((g) => {
    const unmatched = g.asleep - g.switched.length;
    return [
      `- ${g.label}: ${g.asleep} requests found their engine asleep, ${g.awakeAtSend} awake; ${g.joined.length} of the asleep ones joined a switch already under way (another request parked first).${
        unmatched
          ? ` ${unmatched} have no \`woken\` line before their first token (put to sleep after \`/is_sleeping\` said awake, or woken before the send).`
          : ""
      } Per switch, p50 in ms:`,
      line("every switch", g.own),
      line("found room at once", g.clean),
      line("waited for room", g.waited),
      ...(g.waits.length
        ? [
          `  - Its ${g.waits.length} \`wake-waits\` lines: ${
            waitReasons(g)
          }. ${g.staleBusy} name more engines busy than requests were in flight (at most ${
            g.clients - 1
          } besides the parked one), and ${g.staleHolds} an awake engine that "frees nothing": figures read at the last health round.`,
        ]
        : []),
      `  - Engines were put to sleep for room a median ${
        p50(g.roomGaps).toFixed(1)
      } s apart (p95 ${
        p95(g.roomGaps).toFixed(1)
      } s; the health interval is 10 s by default).`,
    ];
  });
  const views = Object.entries(r.views).map(([n, v]) =>
    `${n} ${v.switches} switches, ${v.wakes} wakes, ${v.made_room} put to sleep for room`
  ).join("; ");
  return [
    "Where a switch's time goes (ms, by the journal's times; detection and room only for the request that parked first):",
    "",
    ...rounds,
    `- The launcher's views at the end: ${views}.`,
    `- Start: all three loaded, one asleep, ${
      r.startSeconds.toFixed(1)
    } s after the launcher's spawn.`,
  ];
}
