/**
 * The log phase (issue 8 §4): a stand-in engine writes `PLAN.logBytes` of
 * 100-byte lines to stdout as fast as it can, (a) through the launcher, whose
 * pipes carry it into `<root>/logs/<name>.log`, (b) started directly with
 * stdout redirected to a file by the shell, and (c) with stdout piped to
 * `cat > file`: the floor of any pipe, launcher or not. The order rotates
 * each round. The launcher's log is then read back to check every byte
 * arrived.
 *
 * @module
 */
import { freePorts } from "../../tests/support/helpers.ts";
import { Child } from "../servers/process.ts";
import { FLOOD_CARD, makeRootIn, spawnLauncher } from "../servers/spawn.ts";
import {
  type Bench,
  PLAN,
  progress,
  removeDir,
  rotated,
  sleep,
} from "../plan.ts";

const FAKE_ENGINE =
  new URL("../../tests/fixtures/fake_engine.ts", import.meta.url).pathname;
const DONE = /flood done in (\d+) ms/;
const DRAIN = new URL("../servers/pipe_drain.ts", import.meta.url).pathname;
/** One flood. Times in milliseconds. */
export interface FloodRun {
  /** The engine's own `flood done in` figure. */
  engineMs: number;
  /**
   * Seen from outside: engine spawn → every byte in the file (direct: the
   * done line, written after the last byte; launcher: the log's size).
   */
  outsideMs: number;
  /** Engine stdout bytes found in the file(s). */
  bytes: number;
  /** Bytes the launcher reported lost in `--- … were lost` lines. */
  lost: number;
}

/** Runs of each way, index i of each in the same round. */
export interface LogResults {
  launcher: FloodRun[];
  direct: FloodRun[];
  /** Through a pipe to `cat > file`. */
  pipe: FloodRun[];
  /** Through a pipe into a Deno process that reads and discards (no file). */
  drain: FloodRun[];
}

/** What a log file holds: engine stdout bytes, the done line, the launcher's loss notes. */
interface LogScan {
  bytes: number;
  doneMs: number;
  lost: number;
}

/**
 * Reads `paths` in order and counts the flood: runs of `x` and their
 * newlines. Another line (a `--- ` line of the launcher's, the engine's done
 * line) may have been put in the middle of a flood line, since stdout and
 * stderr are separate pipes: the `x`s before it count, its own newline does
 * not.
 */
async function scanLog(paths: readonly string[]): Promise<LogScan> {
  const X = 0x78;
  const NL = 0x0a;
  const decoder = new TextDecoder();
  const out: LogScan = { bytes: 0, doneMs: Number.NaN, lost: 0 };
  function line(data: Uint8Array, start: number, end: number, nl: number) {
    let i = start;
    while (i < end && data[i] === X) i++;
    if (i === end) {
      out.bytes += end - start + nl;
      return;
    }
    out.bytes += i - start;
    const text = decoder.decode(data.subarray(i, end));
    const done = DONE.exec(text);
    if (done) out.doneMs = Number(done[1]);
    const lost = /(\d+) bytes of engine output were lost/.exec(text);
    if (lost) out.lost += Number(lost[1]);
  }
  let carry = new Uint8Array(0);
  const buffer = new Uint8Array(4 << 20);
  for (const path of paths) {
    using file = await Deno.open(path);
    for (;;) {
      const n = await file.read(buffer);
      if (n === null) break;
      let data = buffer.subarray(0, n);
      if (carry.length > 0) {
        const joined = new Uint8Array(carry.length + n);
        joined.set(carry);
        joined.set(data, carry.length);
        data = joined;
      }
      let start = 0;
      for (;;) {
        const end = data.indexOf(NL, start);
        if (end < 0) break;
        line(data, start, end, 1);
        start = end + 1;
      }
      carry = data.slice(start);
    }
  }
  if (carry.length > 0) line(carry, 0, carry.length, 0);
  return out;
}

/** `<name>.log.N` … `<name>.log.1`, `<name>.log`: the ones that exist, oldest first. */
async function logFiles(path: string): Promise<string[]> {
  const files: string[] = [];
  for (let n = 20; n >= 1; n--) {
    if (await exists(`${path}.${n}`)) files.push(`${path}.${n}`);
  }
  if (await exists(path)) files.push(path);
  return files;
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}

async function sizeOf(path: string): Promise<number> {
  try {
    return (await Deno.stat(path)).size;
  } catch {
    return 0;
  }
}

/** The first line of a file (the launcher's `--- … start:` header), with its newline. */
async function firstLineBytes(path: string): Promise<number> {
  using file = await Deno.open(path);
  const buffer = new Uint8Array(65_536);
  const n = await file.read(buffer) ?? 0;
  const end = buffer.subarray(0, n).indexOf(0x0a);
  return end < 0 ? 0 : end + 1;
}

/**
 * Milliseconds until `path` holds the header, the flood and the done line,
 * polling its size every 5 ms; NaN when it stops growing for 5 s first.
 */
async function waitLogComplete(
  bench: Bench,
  path: string,
  since: number,
): Promise<number> {
  const minDone = "flood done in 0 ms\n".length;
  let header = 0;
  let last = -1;
  let grewAt = performance.now();
  while (!bench.signal.aborted) {
    const size = await sizeOf(path);
    const now = performance.now();
    if (size > 0 && header === 0) header = await firstLineBytes(path);
    if (header > 0 && size >= header + PLAN.logBytes + minDone) {
      return now - since;
    }
    if (size !== last) {
      last = size;
      grewAt = now;
    } else if (now - grewAt > 5_000) {
      return Number.NaN;
    }
    await sleep(5);
  }
  throw new Error("interrupted");
}

/**
 * Stops `sh -c 'engine | cat > file'`: SIGTERM to sh alone would leave the
 * engine serving, so sh's children (the engine and cat) get it first.
 */
async function stopPipeline(child: Child): Promise<void> {
  const children = await Deno.readTextFile(
    `/proc/${child.pid}/task/${child.pid}/children`,
  ).catch(() => "");
  for (const pid of children.trim().split(/\s+/).filter(Boolean)) {
    try {
      Deno.kill(Number(pid), "SIGTERM");
    } catch {
      // Already gone.
    }
  }
  await child.stop();
}

/** One flood through a 1-engine launcher; its log read back after the stop. */
async function throughLauncher(bench: Bench): Promise<FloodRun> {
  await using stack = new AsyncDisposableStack();
  const root = await makeRootIn(bench.work);
  stack.defer(() => removeDir(root));
  const port = freePorts(1);
  const launcher = await spawnLauncher(bench, stack, [FLOOD_CARD], port, {
    root,
    // No rotation during the flood: one file to read back.
    args: ["--log-max-bytes", "1000000000"],
  });
  const started = await launcher.waitForLine(
    new RegExp(`engine ${FLOOD_CARD} \\(\\S+\\) started, pid`),
  );
  const path = `${root}/logs/${FLOOD_CARD}.log`;
  const outsideMs = await waitLogComplete(bench, path, started.at);
  const stop = await launcher.stop();
  if (stop.forced || !stop.status.success) {
    throw new Error(
      `${launcher.name} did not stop cleanly (code ${stop.status.code}):\n${launcher.tail()}`,
    );
  }
  const scan = await scanLog(await logFiles(path));
  return {
    engineMs: scan.doneMs,
    outsideMs,
    bytes: scan.bytes,
    lost: scan.lost,
  };
}

/**
 * One flood from the engine started by `sh`, stdout redirected to a file, or
 * with `pipe` through `cat` into the file.
 */
async function straightToFile(bench: Bench, pipe: boolean): Promise<FloodRun> {
  await using stack = new AsyncDisposableStack();
  const path = `${bench.work}/${pipe ? "pipe" : "direct"}.log`;
  stack.defer(() => Deno.remove(path).catch(() => {}));
  const port = freePorts(1);
  const quote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;
  const child = stack.use(
    new Child(`engine, stdout ${pipe ? "through cat " : ""}to a file`, "sh", [
      "-c",
      `${pipe ? "" : "exec "}${quote(Deno.execPath())} run -A --quiet ${
        quote(FAKE_ENGINE)
      } --host 127.0.0.1 --port ${port} --fake-flood-bytes ${PLAN.logBytes} ${
        pipe ? "| cat " : ""
      }> ${quote(path)}`,
    ], { NO_COLOR: "1" }),
  );
  const done = await child.waitForLine(DONE, 120_000);
  let outsideMs = done.at - child.spawnedAt;
  if (pipe) {
    // cat may still be writing its last reads when the engine is done.
    const until = performance.now() + 10_000;
    while (await sizeOf(path) < PLAN.logBytes && performance.now() < until) {
      await sleep(1);
    }
    outsideMs = performance.now() - child.spawnedAt;
  }
  if (pipe) await stopPipeline(child);
  else await child.stop();
  return {
    engineMs: Number(DONE.exec(done.text)?.[1]),
    outsideMs,
    bytes: await sizeOf(path),
    lost: 0,
  };
}

/** One flood into a Deno process that only reads the pipe: Deno's own floor. */
async function drainedByDeno(): Promise<FloodRun> {
  await using stack = new AsyncDisposableStack();
  const child = stack.use(
    new Child("engine, stdout drained by Deno", Deno.execPath(), [
      "run",
      "-A",
      "--quiet",
      DRAIN,
      "--host",
      "127.0.0.1",
      "--port",
      String(freePorts(1)),
      "--fake-flood-bytes",
      String(PLAN.logBytes),
    ], { NO_COLOR: "1" }),
  );
  const done = await child.waitForLine(DONE, 120_000);
  await child.stop();
  return {
    engineMs: Number(DONE.exec(done.text)?.[1]),
    outsideMs: done.at - child.spawnedAt,
    bytes: PLAN.logBytes,
    lost: 0,
  };
}

/** `PLAN.logRounds` rounds, the order rotated each round. */
export async function logPhase(bench: Bench): Promise<LogResults> {
  const out: LogResults = { launcher: [], direct: [], pipe: [], drain: [] };
  const ways: [keyof LogResults, () => Promise<FloodRun>][] = [
    ["launcher", () => throughLauncher(bench)],
    ["direct", () => straightToFile(bench, false)],
    ["pipe", () => straightToFile(bench, true)],
    ["drain", () => drainedByDeno()],
  ];
  const mb = PLAN.logBytes / 1e6;
  for (let round = 0; round < PLAN.logRounds; round++) {
    progress(
      `log flood ${
        round + 1
      }/${PLAN.logRounds}: ${mb} MB through the launcher, straight to a file, through cat, drained by Deno`,
    );
    for (const [key, flood] of rotated(ways, round)) {
      out[key].push(await flood());
    }
  }
  return out;
}
