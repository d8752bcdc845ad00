import { late } from "../common/sleep.ts";

/** How an engine log rotates. */
export interface EngineLogOptions {
  /** Rotate once the current file passes this many bytes; 0 never rotates. @default {104857600} */
  maxBytes?: number;
  /** Older files kept as `<file>.1` (newest) … `<file>.N`. @default {5} */
  keep?: number;
  /** Bytes that may wait for the disk before new output is dropped. @default {16777216} */
  maxQueuedBytes?: number;
  /** Told of each write that failed (the bytes are dropped and counted). */
  onWriteError?: (error: unknown) => void;
}

export const DEFAULT_LOG_MAX_BYTES = 104_857_600;
export const DEFAULT_LOG_KEEP = 5;
const DEFAULT_MAX_QUEUED = 16 * 1024 * 1024;
const MAX_BATCH = 1024 * 1024;
const encoder = new TextEncoder();

/**
 * One engine's log: append-only, bounded by rotation, lossy rather than
 * blocking. Output is written in the background; when the queue is full or
 * writing fails (disk full, directory removed) bytes are dropped and counted,
 * and one line saying how many were lost is written once writing works again.
 *
 * @example
 * ```ts
 * import { EngineLog } from "./log_sink.ts";
 * const dir = Deno.makeTempDirSync();
 * await using log = new EngineLog(`${dir}/a.log`, { maxBytes: 1024, keep: 2 });
 * log.line("--- started");
 * log.write(new TextEncoder().encode("hello\n"));
 * await log.flush();
 * console.assert(Deno.readTextFileSync(`${dir}/a.log`).includes("hello"));
 * ```
 */
export class EngineLog implements AsyncDisposable {
  /** The current file's path. */
  readonly path: string;
  readonly #maxBytes: number;
  readonly #keep: number;
  readonly #maxQueued: number;
  readonly #onWriteError: ((error: unknown) => void) | undefined;
  #queue: Uint8Array[] = [];
  #queued = 0;
  #file: Deno.FsFile | undefined;
  #size = 0;
  #lost = 0;
  #writing: Promise<void> | undefined;
  #closed = false;
  /** At its size limit and not rotated: nothing more is written until a rotation works. */
  #stuck = false;

  /** The file is opened (and created) on the first write. */
  constructor(path: string, options: EngineLogOptions = {}) {
    this.path = path;
    this.#maxBytes = options.maxBytes ?? DEFAULT_LOG_MAX_BYTES;
    this.#keep = options.keep ?? DEFAULT_LOG_KEEP;
    this.#maxQueued = options.maxQueuedBytes ?? DEFAULT_MAX_QUEUED;
    this.#onWriteError = options.onWriteError;
  }

  #lastOutputAt: number | undefined;

  /** Dropped so far and not yet reported in the file. */
  get lostBytes(): number {
    return this.#lost;
  }

  /** Never waits. The chunk is kept as it is: do not reuse its buffer. */
  write(chunk: Uint8Array): void {
    if (chunk.length === 0) return;
    // Output dropped past the bound is still a sign of life (`--start-timeout`).
    this.#lastOutputAt = Date.now();
    this.#enqueue(chunk);
  }

  /** `Date.now()` of the engine's last output; the launcher's own lines do not count. */
  get lastOutputAt(): number | undefined {
    return this.#lastOutputAt;
  }

  #enqueue(chunk: Uint8Array): void {
    if (this.#closed || chunk.length === 0) return;
    if (this.#queued + chunk.length > this.#maxQueued) {
      this.#lost += chunk.length;
      return;
    }
    this.#queue.push(chunk);
    this.#queued += chunk.length;
    this.#writing ??= this.#drain();
  }

  /** A line of the launcher's own (a header, an exit line). */
  line(text: string): void {
    this.#enqueue(encoder.encode(text.endsWith("\n") ? text : `${text}\n`));
  }

  /** Resolves once everything queued so far is written or dropped. */
  async flush(): Promise<void> {
    while (this.#writing) await this.#writing;
  }

  async #drain(): Promise<void> {
    try {
      while (this.#queue.length > 0) {
        // Batches end near the rotation point, so a file passes it by one chunk at most.
        const room = this.#maxBytes > 0
          ? Math.max(1, this.#maxBytes - this.#size)
          : MAX_BATCH;
        const limit = Math.min(MAX_BATCH, room);
        let taken = 0;
        let length = 0;
        while (taken < this.#queue.length && length < limit) {
          length += this.#queue[taken++]!.length;
        }
        const bytes = concat(this.#queue.splice(0, taken));
        this.#queued -= bytes.length;
        await this.#writeOut(bytes);
      }
    } finally {
      this.#writing = undefined;
    }
  }

  async #writeOut(bytes: Uint8Array): Promise<void> {
    if (this.#stuck && !await this.#rotated()) {
      this.#lost += bytes.length;
      return;
    }
    try {
      const file = await this.#open();
      const out = this.#lost === 0 ? bytes : concat([
        encoder.encode(
          `--- ${
            new Date().toISOString()
          } log: ${this.#lost} bytes of engine output were lost (the log could not be written)\n`,
        ),
        bytes,
      ]);
      this.#lost = 0;
      for (let done = 0; done < out.length;) {
        done += await file.write(out.subarray(done));
      }
      this.#size += out.length;
    } catch (error) {
      // Disk full, directory gone: drop, count, and try a fresh file next time.
      this.#lost += bytes.length;
      this.#onWriteError?.(error);
      this.#file?.close();
      this.#file = undefined;
      return;
    }
    // Written: a rotation that fails loses none of these bytes.
    if (this.#maxBytes > 0 && this.#size >= this.#maxBytes) {
      await this.#rotated();
    }
  }

  /** Rotates; a failure is told once, and the file stops growing (`#stuck`) until one works. */
  async #rotated(): Promise<boolean> {
    try {
      await this.#rotate();
      this.#stuck = false;
      return true;
    } catch (error) {
      if (!this.#stuck) {
        this.#onWriteError?.(
          new Error(
            `cannot rotate it past ${this.#maxBytes} bytes: ${
              (error as Error).message
            }`,
          ),
        );
      }
      this.#stuck = true;
      return false;
    }
  }

  async #open(): Promise<Deno.FsFile> {
    if (this.#file) return this.#file;
    // Opening a FIFO blocks until a reader comes: only a regular file is opened.
    const info = await Deno.stat(this.path).catch(() => undefined);
    if (info && !info.isFile) {
      throw new Error(`${this.path} is not a regular file`);
    }
    const file = await Deno.open(this.path, { append: true, create: true });
    this.#size = (await file.stat()).size;
    return this.#file = file;
  }

  async #rotate(): Promise<void> {
    this.#file?.close();
    this.#file = undefined;
    if (this.#keep <= 0) {
      await Deno.remove(this.path).catch(() => {});
    } else {
      await Deno.remove(`${this.path}.${this.#keep}`).catch(() => {});
      for (let n = this.#keep - 1; n >= 1; n--) {
        await Deno.rename(`${this.path}.${n}`, `${this.path}.${n + 1}`)
          .catch(() => {});
      }
      await Deno.rename(this.path, `${this.path}.1`);
    }
    this.#size = 0;
  }

  /** Writes what is queued (waiting at most `waitMs`: a disk that hangs never holds a stop), then closes; later writes are ignored. */
  async close(waitMs = Infinity): Promise<void> {
    if (waitMs === Infinity) await this.flush();
    else await late(this.flush(), waitMs);
    this.#closed = true;
    this.#file?.close();
    this.#file = undefined;
  }

  /** Same as {@linkcode EngineLog.close}. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

function concat(chunks: Uint8Array[]): Uint8Array {
  if (chunks.length === 1) return chunks[0]!;
  const out = new Uint8Array(chunks.reduce((sum, c) => sum + c.length, 0));
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.length;
  }
  return out;
}
