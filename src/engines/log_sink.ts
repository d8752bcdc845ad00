import { late } from "../common/sleep.ts";

export interface EngineLogOptions {
  /** 0 never rotates. */
  maxBytes?: number;
  /** Older files kept as `<file>.1` (newest) … `<file>.N`. */
  keep?: number;
  /** Bytes that may wait for the disk before new output is dropped. */
  maxQueuedBytes?: number;
  onWriteError?: (error: unknown) => void;
}

export const DEFAULT_LOG_MAX_BYTES = 104_857_600;
export const DEFAULT_LOG_KEEP = 5;
const MAX_BATCH = 1024 * 1024;
const encoder = new TextEncoder();

/**
 * One engine's log: append-only, rotated, lossy rather than blocking. When the
 * queue is full or writing fails (disk full), bytes are dropped and counted,
 * and one line says how many once writing works again.
 */
export class EngineLog {
  readonly path: string;
  readonly #o: Required<EngineLogOptions>;
  #queue: Uint8Array[] = [];
  #queued = 0;
  #writing: Promise<void> | undefined;
  #file: Deno.FsFile | undefined;
  #size = 0;
  #lost = 0;
  #closed = false;
  /** At its size limit and not rotated: nothing more is written until a rotation works. */
  #stuck = false;

  constructor(path: string, options: EngineLogOptions = {}) {
    this.path = path;
    this.#o = {
      maxBytes: options.maxBytes ?? DEFAULT_LOG_MAX_BYTES,
      keep: options.keep ?? DEFAULT_LOG_KEEP,
      maxQueuedBytes: options.maxQueuedBytes ?? 16 * 1024 * 1024,
      onWriteError: options.onWriteError ?? (() => {}),
    };
  }

  get lostBytes(): number {
    return this.#lost;
  }

  /** Never waits. The chunk is kept as it is: do not reuse its buffer. */
  write(chunk: Uint8Array): void {
    if (this.#closed || chunk.length === 0) return;
    if (this.#queued + chunk.length > this.#o.maxQueuedBytes) {
      this.#lost += chunk.length;
      return;
    }
    this.#queue.push(chunk);
    this.#queued += chunk.length;
    this.#writing ??= this.#drain();
  }

  line(text: string): void {
    this.write(encoder.encode(text.endsWith("\n") ? text : `${text}\n`));
  }

  /** Also waits for what is written meanwhile. */
  async flush(): Promise<void> {
    while (this.#writing) await this.#writing;
  }

  // What queued meanwhile goes out as one write (up to 1 MiB, and no further
  // than the rotation): a write per pipe read fell behind a flood and dropped
  // output.
  async #drain(): Promise<void> {
    try {
      while (this.#queue.length > 0) {
        const { maxBytes } = this.#o;
        const room = maxBytes > 0 ? maxBytes - this.#size : Infinity;
        const limit = Math.max(1, Math.min(MAX_BATCH, room));
        let taken = 0;
        let length = 0;
        while (taken < this.#queue.length && length < limit) {
          length += this.#queue[taken++]!.length;
        }
        const bytes = new Uint8Array(length);
        let at = 0;
        for (const chunk of this.#queue.splice(0, taken)) {
          bytes.set(chunk, at);
          at += chunk.length;
        }
        this.#queued -= length;
        await this.#writeOut(bytes);
      }
    } finally {
      this.#writing = undefined;
    }
  }

  async #writeOut(bytes: Uint8Array): Promise<void> {
    if (this.#stuck && !await this.#rotate()) {
      this.#lost += bytes.length;
      return;
    }
    try {
      const file = await this.#open();
      const at = new Date().toISOString();
      const note = this.#lost === 0 ? [] : [
        encoder.encode(
          `--- ${at} log: ${this.#lost} bytes of engine output were lost (the log could not be written)\n`,
        ),
      ];
      this.#lost = 0;
      for (const out of [...note, bytes]) {
        for (let done = 0; done < out.length;) {
          done += await file.write(out.subarray(done));
        }
        this.#size += out.length;
      }
    } catch (error) {
      // Disk full, directory gone: drop, count, and try a fresh file next time.
      this.#lost += bytes.length;
      this.#o.onWriteError(error);
      this.#file?.close();
      this.#file = undefined;
      return;
    }
    // Written: a rotation that fails loses none of these bytes. A file passes
    // the limit by one pipe read at most.
    if (this.#o.maxBytes > 0 && this.#size >= this.#o.maxBytes) {
      await this.#rotate();
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

  /** A failure is told once; the file stops growing until a rotation works. */
  async #rotate(): Promise<boolean> {
    const { keep, maxBytes } = this.#o;
    this.#file?.close();
    this.#file = undefined;
    try {
      if (keep <= 0) await Deno.remove(this.path).catch(() => {});
      else {
        await Deno.remove(`${this.path}.${keep}`).catch(() => {});
        for (let n = keep - 1; n >= 1; n--) {
          await Deno.rename(`${this.path}.${n}`, `${this.path}.${n + 1}`)
            .catch(() => {});
        }
        await Deno.rename(this.path, `${this.path}.1`);
      }
      this.#size = 0;
      this.#stuck = false;
      return true;
    } catch (error) {
      const why = `cannot rotate it past ${maxBytes} bytes`;
      const message = `${why}: ${(error as Error).message}`;
      if (!this.#stuck) this.#o.onWriteError(new Error(message));
      this.#stuck = true;
      return false;
    }
  }

  /** Waits at most `waitMs` for the disk (one that hangs never holds a stop); later writes are ignored. */
  async close(waitMs = Infinity): Promise<void> {
    await (waitMs === Infinity ? this.flush() : late(this.flush(), waitMs));
    this.#closed = true;
    this.#file?.close();
    this.#file = undefined;
  }
}
