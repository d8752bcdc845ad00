// `<directory>/metrics/mymodel_serve_<port>.prom`, kept the way
// node_exporter's textfile collector expects: replaced atomically, removed at
// clean shutdown. A launcher killed outright cannot remove its file, so the
// next one removes the files whose owner (pid and start time, so that a reused
// pid does not pass for it) no longer runs.

import { writeFileAtomic } from "../common/atomic_write.ts";
import { log } from "../common/log.ts";
import { processStartTimes } from "../supervision/records.ts";
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
      log.warn(
        `Cannot remove metrics file ${this.path}: ${(error as Error).message}`,
      );
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
            (error as Error).message
          } (retrying on the next update)`,
        );
      }
    }
  }
}

export interface MetricsOwner {
  pid: number;
  /** Field 22 of `/proc/<pid>/stat`, as text. */
  startTime: string;
}

const OWNER = /^# mymodel_serve owner pid=(\d+) start_time=(\d+)$/m;
const FILE = /^mymodel_serve_(\d+)\.prom$/;
// `writeFileAtomic`'s temporary name: a launcher killed between its write and
// its rename leaves one, which goes with the dead launcher's file.
const TEMPORARY = /^\.mymodel_serve_(\d+)\.prom\.[0-9a-f]+\.tmp$/;
// The owner line is a file's first; a file of any size (a neighbour's, a
// planted one) costs one small read.
const FIRST_LINE_BYTES = 4096;

export function thisOwner(): MetricsOwner | undefined {
  const startTime = processStartTimes([Deno.pid]).get(Deno.pid);
  return startTime ? { pid: Deno.pid, startTime } : undefined;
}

// Prometheus' text format skips comments other than HELP and TYPE.
export function ownerComment(owner: MetricsOwner): string {
  return `# mymodel_serve owner pid=${owner.pid} start_time=${owner.startTime}\n`;
}

export function ownerOf(text: string): MetricsOwner | undefined {
  const match = OWNER.exec(text);
  return match ? { pid: Number(match[1]), startTime: match[2]! } : undefined;
}

// Left alone: this launcher's own file (`port`), files of live launchers, of
// this process, and files naming no owner.
export async function removeDeadOwnersFiles(
  directory: string,
  port: number,
  self: MetricsOwner,
): Promise<void> {
  const found: { path: string; owner: MetricsOwner; port: number }[] = [];
  const temporaries = new Map<number, string[]>();
  try {
    for await (const entry of Deno.readDir(`${directory}/metrics`)) {
      const path = `${directory}/metrics/${entry.name}`;
      const left = TEMPORARY.exec(entry.name);
      // Regular files only: a link planted there is never followed.
      if (entry.isFile && left) {
        const of = Number(left[1]);
        temporaries.set(of, [...temporaries.get(of) ?? [], path]);
      }
      const match = FILE.exec(entry.name);
      if (!entry.isFile || !match || Number(match[1]) === port) continue;
      const owner = ownerOf(await firstLine(path));
      if (owner) found.push({ path, owner, port: Number(match[1]) });
    }
  } catch {
    return; // no metrics/ to read: the write that follows says so
  }
  const alive = processStartTimes(found.map(({ owner }) => owner.pid));
  for (const { path, owner, port: of } of found) {
    const same = owner.pid === self.pid && owner.startTime === self.startTime;
    if (same || alive.get(owner.pid) === owner.startTime) continue;
    for (const temporary of temporaries.get(of) ?? []) {
      await Deno.remove(temporary).catch(() => {});
    }
    try {
      await Deno.remove(path);
      log.info(
        `removed metrics file ${path}: its launcher (pid ${owner.pid}) is gone`,
      );
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) continue; // another launcher removed it
      log.warn(
        `Cannot remove metrics file ${path} of launcher pid ${owner.pid} (gone): ${
          (error as Error).message
        }`,
      );
    }
  }
}

async function firstLine(path: string): Promise<string> {
  try {
    // Replaced since the listing by a FIFO (an open would block) or a device: skipped.
    if (!(await Deno.lstat(path)).isFile) return "";
    using file = await Deno.open(path);
    const bytes = new Uint8Array(FIRST_LINE_BYTES);
    const read = await file.read(bytes) ?? 0;
    return new TextDecoder().decode(bytes.subarray(0, read)).split("\n")[0]!;
  } catch {
    return "";
  }
}
