/**
 * What every phase of `deno task bench` shares: the plan (durations and
 * repetitions), the loads, the bench context, the result types, and a few
 * small helpers.
 *
 * @module
 */
import type { WrkResult } from "./load/wrk.ts";
import type { Child } from "./servers/process.ts";

/** Loopback only. */
export const HOST = "127.0.0.1";
/** The launcher's default per-engine poll timeout in `GET /models`. */
export const POLL_TIMEOUT_MS = 2_000;
/** The "many engines" count. */
export const MANY = 32;

/** Durations (whole seconds, as wrk takes them) and repetitions. */
export const PLAN = {
  warmSeconds: 1,
  healthRounds: 4,
  healthSeconds: 2,
  modelsRounds: 3,
  modelsSeconds: 2,
  hungSeconds: 6,
  hungTimeoutSeconds: 5,
  startReps: 5,
  startRepsMany: 3,
  authRounds: 3,
  authSeconds: 2,
  guardRounds: 4,
  guardSeconds: 2,
  logRounds: 3,
  logBytes: 200_000_000,
  /** Rounds of (this tree, the tree before the GPU start gate, this tree again): a multiple of 3, so each arm takes each place in the order equally often. */
  gateRounds: 6,
  /** Engines per launcher in the "one query per round" windows. */
  gpuEngines: 8,
  /** `--health-interval` there, in seconds. */
  gpuIntervalSeconds: 0.5,
  /** How long each such window lasts (then until the next round ends). */
  gpuWindowSeconds: 10,
  /** Rounds of the `--dry-run` phase (--help, one look, the dry run, the dry run without GPUs). */
  dryRunRounds: 9,
  /** Rounds of (this tree, the tree before the one-engine work, this tree again): a multiple of 3. */
  pipelineRounds: 6,
  /** Rounds of the catalogue phase (5,000 cards plain, with aliases, 10,000 with aliases). */
  catalogueRounds: 5,
  /** Rounds of the journal phase (a restart storm with the journal, and without). */
  journalRounds: 6,
  /** Restarts per storm there. */
  journalRestarts: 200,
  /** SIGHUPs, one after the other, in each arm of the reload phase. */
  reloadSighups: 3,
} as const;

/** `wrk -t1 -c1` or `wrk -t2 -c8`. */
export interface Load {
  name: string;
  threads: number;
  connections: number;
}
/** One connection, one thread. */
export const C1: Load = { name: "c=1", threads: 1, connections: 1 };
/** Eight connections over two threads. */
export const C8: Load = { name: "c=8", threads: 2, connections: 8 };

/** What every step needs. */
export interface Bench {
  work: string;
  /** PATH directory whose `vllm` is the stand-in Deno engine. */
  bin: string;
  /** PATH directory whose `vllm` is `exec sleep 600`: no /health at all. */
  sleepBin: string;
  catalogue: string;
  script: string;
  signal: AbortSignal;
  /** Polls without keeping idle connections open to the measured servers. */
  client: Deno.HttpClient;
}

/** One wrk run and the server's CPU time per request during it. */
export interface Measured extends WrkResult {
  /** Server process CPU (all threads, engines excluded) per request, in µs. */
  cpu: number;
}

/** Results per target, one a round; index i of every target is the same round. */
export type Runs = Record<string, Measured[]>;

/** A server under test: where to send load, and its process. */
export interface Target {
  url: string;
  child: Child;
  /** wrk script for this target (request headers); else the plain one. */
  script?: string;
}

/** Progress goes to stderr; the report to stdout. */
export function progress(message: string): void {
  console.error(`[bench] ${message}`);
}

/** Resolves after `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The median; NaN for no values. */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  const hi = sorted[mid] as number;
  return sorted.length % 2 ? hi : ((sorted[mid - 1] as number) + hi) / 2;
}

/**
 * The nearest-rank quantile (`q` in 0..1): with fewer than 20 values, p95 is
 * the largest. NaN for no values.
 */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(
    Math.max(Math.ceil(q * sorted.length), 1),
    sorted.length,
  );
  return sorted[rank - 1] as number;
}

/**
 * Round `round`'s order of `items` in rotating rounds: the list started at
 * `round % items.length`, wrapped, so each item takes each place in turn.
 */
export function rotated<T>(items: readonly T[], round: number): T[] {
  const shift = round % items.length;
  return [...items.slice(shift), ...items.slice(0, shift)];
}

/** `record[key]`, which must exist. */
export function pick<T>(record: Record<string, T>, key: string): T {
  const value = record[key];
  if (value === undefined) throw new Error(`Cannot find result '${key}'`);
  return value;
}

/** `e01`, `e02`, … */
export function engineNames(count: number): string[] {
  return Array.from(
    { length: count },
    (_, i) => `e${String(i + 1).padStart(2, "0")}`,
  );
}

/** `http://127.0.0.1:PORT/PATH`. */
export function url(port: number, path: string): string {
  return `http://${HOST}:${port}${path}`;
}

/** Removes a directory tree, quietly. */
export async function removeDir(path: string): Promise<void> {
  await Deno.remove(path, { recursive: true }).catch(() => {});
}
