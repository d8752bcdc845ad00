/**
 * The launcher's metrics file, `<directory>/metrics/mymodel_serve_<port>.prom`,
 * kept the way node_exporter's textfile collector expects: replaced
 * atomically, never half-written, removed at clean shutdown. Each write
 * carries its time and its owner, and the first one removes the files that
 * dead launchers left (`owner.ts`).
 *
 * @module
 */

import { log } from "../common/log.ts";
import {
  type MetricsOwner,
  ownerComment,
  removeDeadOwnersFiles,
  thisOwner,
} from "./owner.ts";
import { type MetricsSnapshot, renderMetrics } from "./text.ts";

let temporaries = 0;

/** The metrics file of the launcher on `port` under the root `directory`. */
export function metricsFilePath(directory: string, port: number): string {
  return `${directory}/metrics/mymodel_serve_${port}.prom`;
}

/**
 * Replaces the metrics file atomically: the text goes to a temporary file in
 * the same directory (a dot file ending in `.tmp`, which the textfile
 * collector skips since it reads only `*.prom`), which is then renamed over
 * the file. On failure the temporary file is removed and the error thrown.
 *
 * @param directory The launcher's root directory (holding `metrics/`).
 * @param port The management API's port.
 * @param text The file's new content.
 * @throws {Deno.errors.NotFound} When `<directory>/metrics/` does not exist.
 */
export async function writeMetricsFile(
  directory: string,
  port: number,
  text: string,
): Promise<void> {
  const temporary =
    `${directory}/metrics/.mymodel_serve_${port}.prom.${Deno.pid}.${++temporaries}.tmp`;
  try {
    // 0644: node_exporter usually runs as another user and must read it.
    await Deno.writeTextFile(temporary, text, { mode: 0o644 });
    await Deno.rename(temporary, metricsFilePath(directory, port));
  } catch (error) {
    await Deno.remove(temporary).catch(() => {});
    throw error;
  }
}

/** Removes the metrics file; a file already gone is fine. */
export async function removeMetricsFile(
  directory: string,
  port: number,
): Promise<void> {
  try {
    await Deno.remove(metricsFilePath(directory, port));
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
  }
}

/** Options of {@linkcode MetricsWriter}. */
export interface MetricsWriterOptions {
  /**
   * Writes one file; tests replace it to watch or fail writes.
   * @default {writeMetricsFile}
   */
  write?: typeof writeMetricsFile;
  /**
   * The launcher the files name as owner; tests pose as another. Undefined
   * (`/proc` unreadable): no owner line, and no file of another launcher is
   * removed, since none can be told dead.
   * @default {this process}
   */
  owner?: MetricsOwner | undefined;
}

/**
 * Keeps the metrics file up to date from snapshots, coalescing bursts: at
 * most one write runs at a time, and a snapshot that arrives meanwhile is
 * written after it (only the latest of several). Each write stamps the file
 * with its time (`mymodel_metrics_updated_timestamp_seconds`) and its owner;
 * before the first, the files of launchers that no longer run are removed. A
 * failed write is logged once, never thrown, and retried on the next update;
 * the first success after failures is logged too. Closing waits for the write
 * in flight and removes the file.
 *
 * Snapshots are rendered when written, not when handed over: pass a fresh
 * object to each `update` and do not change it afterwards.
 *
 * @example Write on every state change, remove at shutdown
 * ```ts
 * import { MetricsWriter } from "./file.ts";
 * const root = await Deno.makeTempDir();
 * await Deno.mkdir(`${root}/metrics`);
 * {
 *   await using writer = new MetricsWriter(root, 8000);
 *   writer.update({
 *     launcher: { version: "0.1.0", mode: "development", tls: false, port: 8000, startTimeSeconds: 1 },
 *     engines: [],
 *   });
 *   await writer.idle();
 * }
 * await Deno.remove(root, { recursive: true });
 * ```
 */
export class MetricsWriter implements AsyncDisposable {
  #directory: string;
  #port: number;
  #write: typeof writeMetricsFile;
  #pending: MetricsSnapshot | undefined;
  #running: Promise<void> | undefined;
  #failing = false;
  #closed = false;
  #owner: MetricsOwner | undefined | null = null;
  #swept = false;

  /**
   * Creates a writer; nothing is written before the first `update`.
   *
   * @param directory The launcher's root directory (holding `metrics/`).
   * @param port The management API's port (names the file).
   * @param options How files are written.
   */
  constructor(
    directory: string,
    port: number,
    options: MetricsWriterOptions = {},
  ) {
    this.#directory = directory;
    this.#port = port;
    this.#write = options.write ?? writeMetricsFile;
    if ("owner" in options) this.#owner = options.owner;
  }

  /** The file this writer keeps. */
  get path(): string {
    return metricsFilePath(this.#directory, this.#port);
  }

  /**
   * Schedules writing `snapshot`; returns at once. Ignored after `close()`.
   *
   * @param snapshot The facts to write; it replaces any not yet written.
   */
  update(snapshot: MetricsSnapshot): void {
    if (this.#closed) return;
    this.#pending = snapshot;
    this.#running ??= this.#drain();
  }

  /**
   * Resolves once no write is in flight or waiting.
   *
   * @returns When the latest snapshot has been written (or failed).
   */
  async idle(): Promise<void> {
    while (this.#running) await this.#running;
  }

  /**
   * Stops writing: drops a snapshot not yet started, waits for the write in
   * flight, then removes the file. Failures are logged, not thrown.
   *
   * @returns When the file is gone.
   */
  async close(): Promise<void> {
    if (this.#closed) return await this.idle();
    this.#closed = true;
    this.#pending = undefined;
    await this.idle();
    try {
      await removeMetricsFile(this.#directory, this.#port);
    } catch (error) {
      log.warn(`Cannot remove metrics file ${this.path}: ${message(error)}`);
    }
  }

  /** Same as {@linkcode MetricsWriter.close}. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  async #drain(): Promise<void> {
    try {
      while (this.#pending !== undefined) {
        const snapshot = this.#pending;
        this.#pending = undefined;
        await this.#writeOnce(snapshot);
      }
    } finally {
      this.#running = undefined;
    }
  }

  async #writeOnce(snapshot: MetricsSnapshot): Promise<void> {
    // Read once, at the first write: the launcher's start time needs /proc.
    if (this.#owner === null) this.#owner = thisOwner();
    const owner = this.#owner;
    if (!this.#swept) {
      this.#swept = true;
      if (owner) {
        await removeDeadOwnersFiles(this.#directory, this.#port, owner);
      }
    }
    const text = (owner ? ownerComment(owner) : "") +
      renderMetrics({ ...snapshot, updatedSeconds: Date.now() / 1000 });
    try {
      await this.#write(this.#directory, this.#port, text);
      if (this.#failing) {
        this.#failing = false;
        log.info(`Writing metrics file ${this.path} works again`);
      }
    } catch (error) {
      if (!this.#failing) {
        this.#failing = true;
        log.warn(
          `Cannot write metrics file ${this.path}: ${
            message(error)
          } (retrying on the next update)`,
        );
      }
    }
  }
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
