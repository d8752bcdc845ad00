// Kept as node_exporter's textfile collector expects: replaced atomically; a clean
// stop writes it a last time (`mymodel_launcher_stopped 1`) and leaves it, so the
// alert rules tell a planned stop from a death (a killed launcher's file ages).
// The next launcher on the directory removes the files of launchers gone.
import { writeFileAtomic } from "../common/atomic_write.ts";
import { log } from "../common/log.ts";
import { living, type Owner, thisLauncher } from "../supervision/records.ts";
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
  const path = metricsFilePath(directory, port);
  await writeFileAtomic(path, text, { mode: 0o644 });
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
  // Read at the first write, when the files of dead launchers are removed too.
  #owner: Owner | undefined | (() => Owner | undefined);

  constructor(
    directory: string,
    port: number,
    // `owner` undefined (`/proc` unreadable): no owner line, and no file of
    // another launcher is removed: none can be told dead.
    options: {
      write?: typeof writeMetricsFile;
      owner?: Owner | undefined;
    } = {},
  ) {
    this.#directory = directory;
    this.#port = port;
    this.#write = options.write ?? writeMetricsFile;
    this.#owner = "owner" in options ? () => options.owner : thisLauncher;
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

  /** Removes the file, after the write in flight: the launcher ended on an error. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#pending = undefined;
    await this.idle();
    await removeFile(this.path, "");
  }

  /** A clean stop: `last` is written with `mymodel_launcher_stopped 1` and the file stays. */
  async stop(last: MetricsSnapshot): Promise<void> {
    this.#closed = true;
    this.#pending = undefined;
    await this.idle();
    await this.#writeOnce({
      ...last,
      launcher: { ...last.launcher, stopped: true },
    });
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
        const why = (error as Error).message;
        log.warn(
          `Cannot write metrics file ${this.path}: ${why} (retrying on the next update)`,
        );
      }
    }
  }
}

const OWNER = /^# mymodel_serve owner pid=(\d+) start_time=(\d+)$/m;
const FILE = /^mymodel_serve_(\d+)\.prom$/;
// `writeFileAtomic`'s temporary name: a launcher killed between its write and
// its rename leaves one, which goes with the dead launcher's file.
const TEMPORARY = /^\.mymodel_serve_(\d+)\.prom\.[0-9a-f]+\.tmp$/;
// The owner line is a file's first; a file of any size (a neighbour's, a planted one) costs one small read.
const FIRST_LINE_BYTES = 4096;

// Prometheus' text format skips comments other than HELP and TYPE.
export function ownerComment(owner: Owner): string {
  return `# mymodel_serve owner pid=${owner.pid} start_time=${owner.startTime}\n`;
}

export function ownerOf(text: string): Owner | undefined {
  const match = OWNER.exec(text);
  return match ? { pid: Number(match[1]), startTime: match[2]! } : undefined;
}

// Left alone: this launcher's own file (`port`), files of live launchers, of this process, and files naming no owner.
async function removeDeadOwnersFiles(
  directory: string,
  port: number,
  self: Owner,
): Promise<void> {
  const found: { path: string; owner: Owner; port: number }[] = [];
  const temporaries: { of: number; path: string }[] = [];
  try {
    for await (const entry of Deno.readDir(`${directory}/metrics`)) {
      const path = `${directory}/metrics/${entry.name}`;
      const left = TEMPORARY.exec(entry.name);
      // Regular files only: a link planted there is never followed.
      if (entry.isFile && left) temporaries.push({ of: Number(left[1]), path });
      const match = FILE.exec(entry.name);
      if (!entry.isFile || !match || Number(match[1]) === port) continue;
      const owner = ownerOf(await firstLine(path));
      if (owner) found.push({ path, owner, port: Number(match[1]) });
    }
  } catch {
    return; // no metrics/ to read: the write that follows says so
  }
  const alive = living(found.map(({ owner }) => owner));
  for (const { path, owner, port: of } of found) {
    const same = owner.pid === self.pid && owner.startTime === self.startTime;
    if (same || alive.has(owner)) continue;
    for (const temporary of temporaries.filter((t) => t.of === of)) {
      await Deno.remove(temporary.path).catch(() => {});
    }
    if (await removeFile(path, ` of launcher pid ${owner.pid} (gone)`)) {
      log.info(
        `removed metrics file ${path}: its launcher (pid ${owner.pid}) is gone`,
      );
    }
  }
}

/** False when it was gone already (another launcher removed it) or cannot go (said). */
async function removeFile(path: string, whose: string): Promise<boolean> {
  try {
    await Deno.remove(path);
    return true;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return false;
    const why = (error as Error).message;
    log.warn(`Cannot remove metrics file ${path}${whose}: ${why}`);
    return false;
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
