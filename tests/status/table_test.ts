/** The status table and its relative times, as pure functions of an answer and a clock. */
import assert from "node:assert/strict";
import {
  cellsOf,
  COLUMNS,
  DROPS,
  lastExitText,
  relativeTime,
  renderTable,
  rowsOf,
  shortDuration,
  stateText,
} from "../../src/status/table.ts";
import type { ModelsDetail } from "../../src/status/table.ts";
import { displayWidth } from "../../src/common/display_width.ts";

const NOW = Date.parse("2026-11-22T20:40:00.000Z");
function before(seconds: number): string {
  return new Date(NOW - seconds * 1000).toISOString();
}

const DETAIL: ModelsDetail = {
  active: {
    "llama-3": {
      verb: "chat",
      url: "http://localhost:5001/v1",
      healthy: true,
      state: "ready",
      pid: 81234,
      restarts: 0,
      since: before(240),
      last_exit: null,
      next_restart: null,
      gpus: ["0", "1"],
      gpu_memory_mib: { "0": 70000 },
      footprint: { total_mib: 12595.2, weights_mib: 8000 },
      traffic: {
        running: 3,
        waiting: 1,
        tokens_per_s: 42.5,
        at: before(1),
      },
      a_field_from_the_future: [1, 2, 3],
    },
    "bge-m3": {
      verb: "embed",
      url: "http://localhost:5002/v1",
      healthy: false,
      state: "backoff",
      pid: null,
      restarts: 2,
      since: before(3),
      last_exit: {
        code: 3,
        signal: null,
        at: before(3),
        ran_seconds: 1,
        reason: "exit",
      },
      next_restart: new Date(NOW + 4000).toISOString(),
      gpus: [],
    },
    "qwen3-8b": {
      verb: "chat",
      url: "http://localhost:5003/v1",
      healthy: false,
      state: "waiting",
      pid: null,
      restarts: 0,
      since: before(7200),
      last_exit: null,
      gpus: null,
      waiting_for: { reason: "gpu-memory-free", devices: ["4"], detail: null },
    },
  },
  catalogue: ["bge-m3", "llama-3", "qwen3-8b"],
};

Deno.test("relative times read as people say them, past and future", () => {
  assert.equal(relativeTime(before(0.2), NOW), "just now");
  assert.equal(relativeTime(before(45), NOW), "45s ago");
  assert.equal(relativeTime(before(240), NOW), "4m ago");
  assert.equal(relativeTime(before(3 * 3600 + 50), NOW), "3h ago");
  assert.equal(relativeTime(before(2 * 86400), NOW), "2d ago");
  assert.equal(relativeTime(new Date(NOW + 4000).toISOString(), NOW), "in 4s");
  assert.equal(relativeTime(null, NOW), "-");
  assert.equal(relativeTime("not a time", NOW), "not a time");
  assert.equal(shortDuration(59_999), "59s");
  assert.equal(shortDuration(60_000), "1m");
});

Deno.test("the last exit reads code or signal, the liveness reason, and when", () => {
  assert.equal(lastExitText(null, NOW), "-");
  assert.equal(
    lastExitText({ code: 3, signal: null, at: before(120) }, NOW),
    "code 3, 2m ago",
  );
  assert.equal(
    lastExitText(
      { code: null, signal: "SIGTERM", at: before(5), reason: "unhealthy" },
      NOW,
    ),
    "unhealthy, signal SIGTERM, 5s ago",
  );
});

Deno.test("rows keep the launcher's order and read every reported field", () => {
  const rows = rowsOf(DETAIL);
  assert.deepEqual(rows.map((row) => row.model), [
    "llama-3",
    "bge-m3",
    "qwen3-8b",
  ]);
  assert.deepEqual(cellsOf(rows[0]!, NOW), [
    "llama-3",
    "chat",
    "ready",
    "yes",
    "3+1",
    "42.5",
    "81234",
    "0,1",
    "12.3G",
    "0",
    "4m ago",
    "-",
    "http://localhost:5001/v1",
  ]);
  assert.equal(stateText(rows[2]!, NOW), "waiting (gpu-memory-free)");
  assert.equal(stateText(rows[1]!, NOW), "backoff (restart in 4s)");
});

Deno.test("an entry without detail fields (an older launcher) still gives a row", () => {
  const rows = rowsOf({
    active: { a: { verb: "chat", url: "http://h:1/v1", healthy: true } },
  });
  assert.deepEqual(cellsOf(rows[0]!, NOW), [
    "a",
    "chat",
    "unknown",
    "yes",
    "-",
    "-",
    "-",
    "-",
    "-",
    "-",
    "-",
    "-",
    "http://h:1/v1",
  ]);
});

Deno.test("the table aligns its columns, one line per engine, no trailing spaces", () => {
  const text = renderTable(rowsOf(DETAIL), { now: NOW });
  const lines = text.split("\n");
  assert.equal(lines.length, 4);
  assert.ok(!text.includes("\x1b["), "no colour unless asked");
  for (const line of lines) assert.equal(line, line.trimEnd());
  // Every column starts at the same offset on every line.
  for (
    const title of ["VERB", "STATE", "HEALTHY", "REQ", "TOK/S", "PID", "URL"]
  ) {
    const at = lines[0]!.indexOf(title);
    assert.ok(at > 0, title);
    for (const line of lines.slice(1)) {
      assert.notEqual(line[at - 1], undefined);
      assert.equal(line[at - 1], " ", `${title} in ${line}`);
      assert.notEqual(line[at], " ", `${title} in ${line}`);
    }
  }
  assert.match(
    lines[1]!,
    /^llama-3 +chat +ready +yes +3\+1 +42\.5 +81234 +0,1 +12\.3G +0 +4m ago +- +http:\/\/localhost:5001\/v1$/,
  );
  assert.match(
    lines[2]!,
    /^bge-m3 +embed +backoff \(restart in 4s\) +no +- +- +- +none +- +2 +3s ago +code 3, 3s ago +http/,
  );
  assert.match(
    lines[3]!,
    /waiting \(gpu-memory-free\) +no +- +- +- +- +- +0 +2h ago/,
  );
});

Deno.test("colour paints the cells only, so columns stay aligned", () => {
  const rows = rowsOf(DETAIL);
  const plain = renderTable(rows, { now: NOW });
  const coloured = renderTable(rows, { now: NOW, color: true });
  assert.ok(coloured.includes("\x1b[32mready\x1b[0m"));
  assert.ok(coloured.includes("\x1b[31mno\x1b[0m"));
  // deno-lint-ignore no-control-regex
  assert.equal(coloured.replace(/\x1b\[[0-9;]*m/g, ""), plain);
});

Deno.test("traffic: REQ shows running (+waiting), TOK/S the rate; - when null or absent", () => {
  const rows = rowsOf({
    active: {
      a: { traffic: { running: 0, waiting: 0, tokens_per_s: null } },
      b: { traffic: { running: 12, waiting: 0, tokens_per_s: 1234.56 } },
      c: { traffic: null },
      d: { traffic: { running: 1, waiting: 0, tokens_per_s: 0 } },
    },
  });
  const req = COLUMNS.indexOf("REQ");
  assert.deepEqual(cellsOf(rows[0]!, NOW).slice(req, req + 2), ["0", "-"]);
  assert.deepEqual(cellsOf(rows[2]!, NOW).slice(req, req + 2), ["-", "-"]);
  const lines = renderTable(rows, { now: NOW }).split("\n");
  const cell = (line: string, title: string) =>
    line.slice(lines[0]!.indexOf(title)).split(/ +/)[0];
  assert.deepEqual(lines.slice(1).map((l) => cell(l, "REQ")), [
    "0",
    "12",
    "-",
    "1",
  ]);
  assert.deepEqual(lines.slice(1).map((l) => cell(l, "TOK/S")), [
    "-",
    "1235",
    "-",
    "0.0",
  ]);
});

/** An answer whose free text alone takes 130 columns: a long last exit and URL. */
const WIDE: ModelsDetail = {
  active: {
    "qwen3-coder-30b-a3b": {
      ...DETAIL.active["bge-m3"]!,
      url: "https://gpu-node-17.cluster.example.internal:5003/v1",
      last_exit: {
        code: 1,
        at: before(120),
        cause: "gpu-out-of-memory",
        message:
          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
      },
    },
    "llama-3": DETAIL.active["llama-3"]!,
    "qwen3-8b": DETAIL.active["qwen3-8b"]!,
  },
};

/** The shown titles, read off the title line. */
function titlesOf(text: string): string[] {
  return text.split("\n")[0]!.split(/ {2,}/);
}

Deno.test("given a terminal's width, each engine stays on one line: the free text cut with …, whole columns dropped", async (t) => {
  const rows = rowsOf(WIDE);
  const whole = renderTable(rows, { now: NOW });
  assert.ok(whole.split("\n").some((line) => line.length > 130));
  for (const width of [100, 120, 160]) {
    const text = renderTable(rows, { now: NOW, width });
    const lines = text.split("\n");
    assert.equal(lines.length, 4);
    for (const line of lines) {
      assert.ok(line.length <= width, `${line.length} > ${width}: ${line}`);
    }
    assert.ok(text.includes("…"));
    // Titles stay whole; columns stay aligned.
    assert.match(
      lines[0]!,
      /REQ +TOK\/S( +PID)? +GPUS +MEM +RESTARTS +SINCE +LAST EXIT( +URL)?$/,
    );
    // PID goes after the URL (at 100 columns).
    const pid = lines[0]!.indexOf("PID");
    if (width > 100) assert.equal(lines[2]!.slice(pid, pid + 5), "81234");
    else assert.equal(pid, -1);
    // Colour keeps the cut text aligned too.
    const coloured = renderTable(rows, { now: NOW, width, color: true });
    // deno-lint-ignore no-control-regex
    assert.equal(coloured.replace(/\x1b\[[0-9;]*m/g, ""), text);
  }
  // Wide enough: nothing is cut.
  assert.equal(renderTable(rows, { now: NOW, width: 400 }), whole);

  await t.step(
    "at 80 columns (a fresh ssh session) the model names stay whole, the URL and then PID, GPUS, VERB go",
    () => {
      const text = renderTable(rows, { now: NOW, width: 80 });
      const lines = text.split("\n");
      for (const line of lines) assert.ok(line.length <= 80, line);
      assert.deepEqual(lines.slice(1).map((line) => line.split(" ")[0]), [
        "qwen3-coder-30b-a3b",
        "llama-3",
        "qwen3-8b",
      ]);
      assert.deepEqual(titlesOf(text), [
        "MODEL",
        "STATE",
        "HEALTHY",
        "REQ",
        "TOK/S",
        "RESTARTS",
        "SINCE",
        "LAST EXIT",
      ]);
      assert.match(
        lines[2]!,
        /^llama-3 +ready +yes +3\+1 +42\.5 +0 +4m ago +-$/,
      );
    },
  );

  await t.step(
    "narrowing the terminal drops columns in DROPS order, the help's, and never MODEL",
    () => {
      let gone = 0;
      for (let width = 200; width >= 20; width--) {
        const text = renderTable(rows, { now: NOW, width });
        const titles = titlesOf(text);
        const dropped = COLUMNS.filter((title) => !titles.includes(title));
        // The dropped columns are always the first of DROPS, more as it narrows.
        assert.deepEqual(
          new Set(dropped),
          new Set(DROPS.slice(0, dropped.length)),
          `${width}`,
        );
        assert.ok(dropped.length >= gone, `${width}`);
        gone = dropped.length;
        assert.ok(text.includes("qwen3-coder-30b-a3b"), `${width}`);
        // A row fits while MODEL and STATE (cut to 9) can.
        if (width >= 19 + 2 + 9) {
          for (const line of text.split("\n")) {
            assert.ok(line.length <= width, `${width}: ${line}`);
          }
        }
      }
      assert.equal(gone, DROPS.length, "down to MODEL and STATE");
    },
  );
});

Deno.test("every column but MODEL and STATE is in the drop order, once (a new column joins it)", () => {
  assert.deepEqual(
    [...DROPS].sort(),
    COLUMNS.filter((title) => title !== "MODEL" && title !== "STATE").sort(),
  );
});

Deno.test("widths are terminal columns: CJK counts two, a cut never splits a character", () => {
  const rows = rowsOf({
    active: {
      "通义千问-7b": {
        ...DETAIL.active["bge-m3"]!,
        last_exit: {
          code: 1,
          at: before(3),
          // A surrogate pair (U+20000) and a combining accent where a cut may fall.
          message:
            "显存不足 \u{20000}\u{20000} cafe\u0301 cafe\u0301 e\u0301e\u0301e\u0301",
        },
      },
      "llama-3": DETAIL.active["llama-3"]!,
    },
  });
  const whole = renderTable(rows, { now: NOW });
  const wholeLines = whole.split("\n");
  // Columns start at the same terminal column on every line.
  const startOf = (line: string, at: number) => displayWidth(line.slice(0, at));
  const url = wholeLines[0]!.indexOf("URL");
  assert.equal(startOf(wholeLines[1]!, wholeLines[1]!.indexOf("http")), url);
  assert.equal(startOf(wholeLines[2]!, wholeLines[2]!.indexOf("http")), url);
  const full = displayWidth(wholeLines[1]!);
  for (let width = full - 1; width >= 60; width--) {
    const text = renderTable(rows, { now: NOW, width });
    const lines = text.split("\n");
    assert.ok(lines[1]!.startsWith("通义千问-7b "), lines[1]);
    for (const line of lines) {
      assert.ok(displayWidth(line) <= width, `${width}: ${line}`);
      assert.ok(line.isWellFormed(), `a split surrogate pair at ${width}`);
      assert.doesNotMatch(line, /(?<!e)\u0301/, `a split accent at ${width}`);
    }
    const state = lines[0]!.indexOf("STATE");
    assert.equal(startOf(lines[1]!, lines[1]!.indexOf("backoff")), state);
  }
});

Deno.test("engine text reaches the table cleaned: LAST EXIT and every free-text cell lose escapes and controls, keep their words", () => {
  const hostile = "\x1b]0;owned\x07\x1b]52;c;ZXZpbA==\x07\x1b[2J\x1b[3;1H";
  const rows = rowsOf({
    active: {
      [`m${hostile}`]: {
        verb: `chat${hostile}`,
        url: `http://localhost:5001/v1\x00`,
        state: `starting`,
        phase: `loading\x1b[1A`,
        phase_since: before(5),
        healthy: false,
        pid: 7,
        restarts: 1,
        since: before(5),
        gpus: ["0\x07"],
        last_exit: {
          code: 1,
          at: before(60),
          cause: `model-not-found\x9b2J`,
          message:
            `${hostile}OSError: model not found\r\n[serve] info: all fine\x00`,
        },
        waiting_for: null,
      },
    },
  });
  const text = renderTable(rows, { now: NOW, color: false });
  assert.ok(
    // deno-lint-ignore no-control-regex -- looking for them
    !/[\x00-\x08\x0a-\x1f\x7f-\x9f]/.test(text.replaceAll("\n", "")),
    JSON.stringify(text),
  );
  const lines = text.split("\n");
  assert.equal(lines.length, 2, "one title line and one row: no faked line");
  assert.match(
    lines[1]!,
    /^m {3,}chat {3,}starting \(loading, 5s\) {3,}no {3,}- {3,}- {3,}7 {3,}0 {3,}- {3,}1 {3,}5s ago {3,}code 1, model-not-found, 1m ago: OSError: model not found \[serve\] info: all fine {3,}http:\/\/localhost:5001\/v1$/,
  );
  // Without hostile text, the same table as before.
  assert.equal(
    lastExitText({ code: 3, at: before(3), reason: "exit" }, NOW),
    "code 3, 3s ago",
  );
});

Deno.test("MEM is the footprint's total: MiB below 10G, GiB with a decimal above, - when none", () => {
  const rows = rowsOf({
    active: {
      a: { footprint: { total_mib: 162.06 } },
      b: { footprint: { total_mib: 12595.2 } },
      c: { footprint: null },
      d: { footprint: { total_mib: "lots" } },
    },
  });
  const mem = COLUMNS.indexOf("MEM");
  assert.equal(COLUMNS[mem - 1], "GPUS", "beside the devices");
  assert.deepEqual(rows.map((row) => cellsOf(row, NOW)[mem]), [
    "162M",
    "12.3G",
    "-",
    "-",
  ]);
});

Deno.test("MEM of a sleeping engine is what it keeps asleep (its residue), of one awake its footprint", () => {
  const footprint = { total_mib: 22000 };
  const sleep = { residue_bytes: 600 * 2 ** 20 };
  const rows = rowsOf({
    active: {
      asleep: { state: "sleeping", footprint, sleep },
      awake: { state: "ready", footprint, sleep },
      unmeasured: { state: "sleeping", footprint, sleep: null },
    },
  });
  const mem = COLUMNS.indexOf("MEM");
  assert.deepEqual(rows.map((row) => cellsOf(row, NOW)[mem]), [
    "600M",
    "21.5G",
    "21.5G",
  ]);
});

Deno.test("a draining engine's STATE says what is in flight and when SIGTERM comes at most", () => {
  const draining = (drain: unknown) =>
    rowsOf({
      active: {
        m: {
          verb: "chat",
          state: "draining",
          drain,
        },
      },
    })[0]!;
  assert.equal(
    stateText(
      draining({
        since: before(2),
        deadline: new Date(NOW + 28_000).toISOString(),
        running: 2,
        waiting: 1,
      }),
      NOW,
    ),
    "draining (3 in flight, SIGTERM in 28s at most)",
  );
  assert.equal(
    stateText(
      draining({
        since: before(0),
        deadline: new Date(NOW + 30_000).toISOString(),
        running: null,
        waiting: null,
      }),
      NOW,
    ),
    "draining (SIGTERM in 30s at most)",
  );
  assert.equal(stateText(draining(null), NOW), "draining");
});
