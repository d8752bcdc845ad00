import assert from "node:assert/strict";
import { main } from "../../src/status/main.ts";
import { eventText, showEvents } from "../../src/status/events.ts";
import { Journal, journalPath } from "../../src/supervision/journal.ts";

function journal(dir: string, events: object[], file = "events.jsonl"): void {
  Deno.mkdirSync(`${dir}/logs`, { recursive: true });
  Deno.writeTextFileSync(
    `${dir}/logs/${file}`,
    events.map((e) => JSON.stringify(e) + "\n").join(""),
    { append: true },
  );
}

function ev(
  at: string,
  model: string | null,
  from: string | null,
  to: string | null,
  reason: string | null = null,
) {
  return {
    at,
    model,
    event: from || to ? "state" : "started",
    from,
    to,
    reason,
    detail: null,
  };
}

async function captured(
  args: string[],
): Promise<{ code: number; out: string[]; err: string[] }> {
  const out: string[] = [];
  const err: string[] = [];
  const { log, error } = console;
  console.log = (line: string) => out.push(line);
  console.error = (line: string) => err.push(line);
  try {
    return { code: await main(args), out, err };
  } finally {
    console.log = log;
    console.error = error;
  }
}

Deno.test("status --events prints the journal for people, rotated files first, newest last", async () => {
  const dir = Deno.makeTempDirSync();
  try {
    journal(
      dir,
      [ev("2026-11-25T08:00:00.000Z", null, null, null)],
      "events.jsonl.1",
    );
    journal(dir, [
      ev(
        "2026-11-25T08:00:01.000Z",
        "a",
        "starting",
        "backoff",
        "bad-arguments",
      ),
      ev("2026-11-25T08:00:02.000Z", "b", "starting", "ready"),
    ]);
    Deno.writeTextFileSync(`${dir}/logs/events.jsonl`, "--- not an event\n", {
      append: true,
    });
    const { code, out } = await captured(["--events", "--directory", dir]);
    assert.equal(code, 0);
    assert.deepEqual(out, [
      "2026-11-25 08:00:00.000  launcher  started",
      "2026-11-25 08:00:01.000  a  starting → backoff  (bad-arguments)",
      "2026-11-25 08:00:02.000  b  starting → ready",
    ]);
    const only = await captured([
      "--events",
      "--directory",
      dir,
      "--model",
      "a",
      "--json",
    ]);
    assert.equal(only.out.length, 2, "a's event and the launcher's");
    assert.deepEqual(JSON.parse(only.out[1]!).model, "a");
    const recent = await captured([
      "--events",
      "--directory",
      dir,
      "--since",
      "30m",
    ]);
    assert.deepEqual(recent.out, [], "nothing in the last 30 minutes");
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("status --events on a directory without a journal says so in one line, exit 1", async () => {
  const dir = Deno.makeTempDirSync();
  try {
    const { code, out, err } = await captured(["--events", "--directory", dir]);
    assert.equal(code, 1);
    assert.deepEqual(out, []);
    assert.equal(err.length, 1);
    assert.match(err[0]!, /no journal at .*events\.jsonl/);
    assert.equal(
      (await captured(["--events", "--since", "soon", "--directory", dir]))
        .code,
      2,
    );
    assert.equal((await captured(["--follow"])).code, 2);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("status --events --follow prints events appended later, also after a rotation", async () => {
  const dir = Deno.makeTempDirSync();
  try {
    journal(dir, [ev("2026-11-25T08:00:00.000Z", null, null, null)]);
    const stop = new AbortController();
    const seen: string[] = [];
    const following = showEvents({
      directory: dir,
      follow: true,
      signal: stop.signal,
      print: (l) => seen.push(l),
    });
    journal(dir, [ev("2026-11-25T08:00:01.000Z", "a", "starting", "ready")]);
    await new Promise((r) => setTimeout(r, 700));
    Deno.renameSync(`${dir}/logs/events.jsonl`, `${dir}/logs/events.jsonl.1`);
    journal(dir, [ev("2026-11-25T08:00:02.000Z", "a", "ready", "stopping")]);
    await new Promise((r) => setTimeout(r, 700));
    stop.abort();
    assert.equal(await following, 0);
    assert.equal(seen.length, 3, seen.join("\n"));
    assert.match(seen[2]!, /ready → stopping/);
    assert.equal(eventText("{}"), undefined);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("status --events prints engine text cleaned; --json keeps the data exact and escapes raw C1", async () => {
  const dir = Deno.makeTempDirSync();
  try {
    const detail =
      "exit: code 1: \x1b]0;owned\x07\x1b]52;c;ZXZpbA==\x1b\\\x1b[2JOSError: gone\r\n[serve] error: fake\x00\x9b2J";
    journal(dir, [{
      ...ev("2026-11-25T08:00:01.000Z", "a\x1b[31m", "starting", "exited"),
      reason: "model-not-found\x07",
      detail,
    }]);
    const { code, out } = await captured(["--events", "--directory", dir]);
    assert.equal(code, 0);
    assert.deepEqual(out, [
      "2026-11-25 08:00:01.000  a  starting → exited  (model-not-found)  exit: code 1: OSError: gone [serve] error: fake",
    ]);
    const json = await captured(["--events", "--directory", dir, "--json"]);
    assert.equal(json.out.length, 1);
    // deno-lint-ignore no-control-regex -- looking for them
    assert.ok(!/[\x00-\x1f\x7f-\x9f]/.test(json.out[0]!), json.out[0]);
    assert.equal(JSON.parse(json.out[0]!).detail, detail, "the data, exact");
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("status --events --follow loses nothing at rotation: every event once, in order, across many rotations", async () => {
  const dir = Deno.makeTempDirSync();
  Deno.mkdirSync(`${dir}/logs`);
  // The launcher's own journal, rotating every ~12 events, keeping 5 files.
  const journal = new Journal(journalPath(dir), { maxBytes: 2_000, keep: 5 });
  const stop = new AbortController();
  const seen: string[] = [];
  const ROUNDS = 8;
  const PER_ROUND = 30;
  try {
    journal.record({ model: null, event: "started", detail: "n=0" });
    await journal.flush();
    const following = showEvents({
      directory: dir,
      follow: true,
      signal: stop.signal,
      json: true,
      print: (line) => seen.push(line),
    });
    let n = 0;
    for (let round = 0; round < ROUNDS; round++) {
      // Two or three rotations between two looks of the follower.
      for (let i = 0; i < PER_ROUND; i++) {
        journal.record({
          model: "m",
          event: "state",
          from: "starting",
          to: "backoff",
          detail: `n=${++n}`,
        });
        if (i % 5 === 4) await journal.flush();
      }
      await journal.flush();
      await new Promise((resolve) => setTimeout(resolve, 650));
    }
    stop.abort();
    assert.equal(await following, 0);
    const numbers = seen.map((line) =>
      Number(JSON.parse(line).detail.slice(2))
    );
    assert.deepEqual(
      numbers,
      Array.from({ length: ROUNDS * PER_ROUND + 1 }, (_, i) => i),
      `lost or repeated: ${numbers.length} of ${ROUNDS * PER_ROUND + 1}`,
    );
    assert.ok(
      Deno.statSync(`${journalPath(dir)}.5`).isFile,
      "the journal did rotate past its kept files",
    );
  } finally {
    stop.abort();
    await journal.close();
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("status --events skips a line of megabytes (a journal from elsewhere) and prints the events around it", async () => {
  const dir = Deno.makeTempDirSync();
  try {
    journal(dir, [ev("2026-11-25T08:00:00.000Z", null, null, null)]);
    Deno.writeTextFileSync(
      `${dir}/logs/events.jsonl`,
      `${"x".repeat(3 * 1024 * 1024)}\n`,
      { append: true },
    );
    journal(dir, [ev("2026-11-25T08:00:01.000Z", "a", "starting", "ready")]);
    const { code, out } = await captured(["--events", "--directory", dir]);
    assert.equal(code, 0);
    assert.deepEqual(out, [
      "2026-11-25 08:00:00.000  launcher  started",
      "2026-11-25 08:00:01.000  a  starting → ready",
    ]);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("status --events --model and --since pass over journal lines that are JSON but not an event (null, a number)", async () => {
  const dir = Deno.makeTempDirSync();
  try {
    journal(dir, [ev("2026-11-25T08:00:01.000Z", "a", "loading", "ready")]);
    Deno.writeTextFileSync(`${dir}/logs/events.jsonl`, "null\n3\n", {
      append: true,
    });
    journal(dir, [ev("2026-11-25T08:00:02.000Z", "a", "ready", "stopped")]);
    const r = await captured([
      "--events",
      "--directory",
      dir,
      "--model",
      "a",
      "--since",
      "1000d",
    ]);
    assert.equal(r.code, 0, r.err.join("\n"));
    assert.equal(r.out.length, 2);
    assert.match(r.out[0]!, /a {2}loading → ready/);
    assert.match(r.out[1]!, /a {2}ready → stopped/);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});
