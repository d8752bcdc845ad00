/**
 * `wrk` as the load generator: one bounded run, its result read from a Lua
 * `done()` hook that prints one JSON line (no scraping of wrk's human output).
 *
 * @module
 */

/** wrk is not installed. */
export class WrkMissingError extends Error {
  /** @param options The spawn error as `cause`. */
  constructor(options?: ErrorOptions) {
    super("wrk not found: apt-get install wrk", options);
    this.name = "WrkMissingError";
  }
}

/** One wrk run. */
export interface WrkOptions {
  url: string;
  threads: number;
  connections: number;
  /** Whole seconds. */
  seconds: number;
  /**
   * Per-request timeout in whole seconds.
   * @default {2}
   */
  timeoutSeconds?: number;
  /** Aborting it kills wrk. */
  signal?: AbortSignal;
}

/** What a wrk run measured. Latencies in milliseconds. */
export interface WrkResult {
  requests: number;
  seconds: number;
  rps: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
  errors: {
    connect: number;
    read: number;
    write: number;
    status: number;
    timeout: number;
  };
}

const MARK = "WRK_JSON ";

/** The `done()` hook: wrk gives latencies and duration in microseconds. */
const SCRIPT = `done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '${MARK}{"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,"p50":%d,"p90":%d,"p99":%d,"max":%d,"mean":%.3f}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean))
end
`;

/**
 * Checks wrk can be run and returns its version line.
 *
 * @throws {WrkMissingError} When `wrk` is not on PATH.
 */
export async function wrkVersion(): Promise<string> {
  try {
    // `wrk --version` prints the version and usage, and exits non-zero.
    const { stdout } = await new Deno.Command("wrk", {
      args: ["--version"],
      stdin: "null",
      stdout: "piped",
      stderr: "null",
    }).output();
    return new TextDecoder().decode(stdout).split("\n")[0]?.trim() ?? "wrk";
  } catch (cause) {
    if (cause instanceof Deno.errors.NotFound) {
      throw new WrkMissingError({ cause });
    }
    throw cause;
  }
}

/**
 * Writes the Lua reporting script into `dir`.
 *
 * @param dir Where to write it.
 * @param name The file name.
 * @param prelude Lua run before the reporting hook (request headers, a
 * `request()` function).
 * @returns Its path, for {@linkcode runWrk}.
 */
export async function writeWrkScript(
  dir: string,
  name = "report.lua",
  prelude = "",
): Promise<string> {
  const path = `${dir}/${name}`;
  await Deno.writeTextFile(path, `${prelude}\n${SCRIPT}`);
  return path;
}

function num(record: Record<string, unknown>, key: string): number {
  const value = record[key];
  if (typeof value !== "number" || !Number.isFinite(value)) {
    throw new Error(`Cannot read wrk's report: '${key}' is not a number`);
  }
  return value;
}

/**
 * Parses the line the Lua hook printed.
 *
 * @throws {Error} When no such line is found or a field is missing.
 */
export function parseWrkReport(stdout: string): WrkResult {
  const line = stdout.split("\n").find((l) => l.startsWith(MARK));
  if (!line) throw new Error("Cannot read wrk's report: no WRK_JSON line");
  const r = JSON.parse(line.slice(MARK.length)) as Record<string, unknown>;
  const seconds = num(r, "duration_us") / 1e6;
  const requests = num(r, "requests");
  return {
    requests,
    seconds,
    rps: seconds > 0 ? requests / seconds : 0,
    p50: num(r, "p50") / 1000,
    p90: num(r, "p90") / 1000,
    p99: num(r, "p99") / 1000,
    max: num(r, "max") / 1000,
    mean: num(r, "mean") / 1000,
    errors: {
      connect: num(r, "connect"),
      read: num(r, "read"),
      write: num(r, "write"),
      status: num(r, "status"),
      timeout: num(r, "timeout"),
    },
  };
}

/**
 * Runs wrk once against `url`, killed if it overruns its own duration by 10 s.
 *
 * @param script The path from {@linkcode writeWrkScript}.
 * @param options Target, threads, connections, duration, timeout.
 * @returns The parsed report.
 * @throws {Error} When wrk fails or prints no report.
 */
export async function runWrk(
  script: string,
  options: WrkOptions,
): Promise<WrkResult> {
  const timeout = options.timeoutSeconds ?? 2;
  const child = new Deno.Command("wrk", {
    args: [
      `-t${options.threads}`,
      `-c${options.connections}`,
      `-d${options.seconds}s`,
      `--timeout`,
      `${timeout}s`,
      "-s",
      script,
      options.url,
    ],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    ...(options.signal ? { signal: options.signal } : {}),
  }).spawn();
  const guard = setTimeout(() => {
    try {
      child.kill("SIGKILL");
    } catch {
      // Already exited.
    }
  }, (options.seconds + timeout + 10) * 1000);
  try {
    const { code, stdout, stderr } = await child.output();
    const out = new TextDecoder().decode(stdout);
    try {
      return parseWrkReport(out);
    } catch (cause) {
      const err = new TextDecoder().decode(stderr).trim();
      throw new Error(
        `Cannot benchmark ${options.url}: wrk exited with code ${code}: ${
          (err || out).trim().split("\n").slice(-5).join(" | ")
        }`,
        { cause },
      );
    }
  } finally {
    clearTimeout(guard);
  }
}
