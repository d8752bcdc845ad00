// `<directory>/metrics/mymodel_serve_<port>.prom`, kept the way
// node_exporter's textfile collector expects: replaced atomically, removed at
// clean shutdown.

import { writeFileAtomic } from "../common/atomic_write.ts";
import { log } from "../common/log.ts";
import {
  type MetricsOwner,
  ownerComment,
  removeDeadOwnersFiles,
  thisOwner,
} from "./owner.ts";
import { type MetricsSnapshot, renderMetrics } from "./text.ts";

export function metricsFilePath(directory: string, port: number): string {
  return `${directory}/metrics/mymodel_serve_${port}.prom`;
}

// The collector reads only `*.prom`: it skips the temporary file. `metrics/`
// is often shared with node_exporter, so the temporary name is not guessable.
export async function writeMetricsFile(
  directory: string,
  port: number,
  text: string,
): Promise<void> {
  // 0644: node_exporter usually runs as another user and must read it.
  await writeFileAtomic(metricsFilePath(directory, port), text, {
    mode: 0o644,
  });
}

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

interface MetricsWriterOptions {
  write?: typeof writeMetricsFile;
  // Tests pose as another launcher. Undefined (`/proc` unreadable): no owner
  // line, and no file of another launcher is removed: none can be told dead.
  owner?: MetricsOwner | undefined;
}

// One write at a time and only the latest snapshot waiting; a snapshot is
// rendered when written, so it must not change after `update`.
export class MetricsWriter implements AsyncDisposable {
  #directory: string;
  #port: number;
  #write: typeof writeMetricsFile;
  #pending: MetricsSnapshot | undefined;
  #running: Promise<void> | undefined;
  #failing = false;
  #closed = false;
  // Read at the first write (the launcher's start time needs /proc), when
  // the files of dead launchers are removed too.
  #owner: MetricsOwner | undefined | (() => MetricsOwner | undefined);

  constructor(
    directory: string,
    port: number,
    options: MetricsWriterOptions = {},
  ) {
    this.#directory = directory;
    this.#port = port;
    this.#write = options.write ?? writeMetricsFile;
    this.#owner = "owner" in options ? () => options.owner : thisOwner;
  }

  get path(): string {
    return metricsFilePath(this.#directory, this.#port);
  }

  update(snapshot: MetricsSnapshot): void {
    if (this.#closed) return;
    this.#pending = snapshot;
    this.#running ??= this.#drain();
  }

  async idle(): Promise<void> {
    while (this.#running) await this.#running;
  }

  /** Drops a snapshot not yet started, waits for the write in flight, removes the file. */
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
    if (typeof this.#owner === "function") {
      this.#owner = this.#owner();
      if (this.#owner) {
        await removeDeadOwnersFiles(this.#directory, this.#port, this.#owner);
      }
    }
    const owner = this.#owner;
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
