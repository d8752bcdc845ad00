// An engine's local weights read through once, in order, while it waits (the
// gate, a backoff, its spawn): its load then finds them in the page cache.
// Deno has no posix_fadvise; plain reads, discarded, are what fills the cache.
import type { EnginePlan } from "../engines/engine_plan.ts";
import { weightFiles } from "../engines/launch.ts";
import { oneLine } from "../common/one_line.ts";
import { procFile } from "../engines/proc.ts";
import { type Clock, REAL_CLOCK } from "../common/sleep.ts";

const GIB = 1024 ** 3;
/** Left free beyond what it reads: the engine's own load and the machine's. */
export const READ_AHEAD_MARGIN = 2 * GIB;
const CHUNK = 8 * 1024 ** 2;
/** A line of the read-ahead's; `skipped`: it read less than it would have, the launcher's log says so. */
type Say = (line: string, skipped: boolean) => void;
const mib = (bytes: number) => `${Math.round(bytes / 2 ** 20)} MiB`;

/** One launcher's read-aheads: the devices its engines load from, to never compete with one. */
export class ReadAhead {
  readonly #loading = new Map<string, number>(); // engine name: st_dev of its weights

  constructor(
    readonly meminfo = (): string => procFile("/proc/meminfo"),
    readonly clock: Clock = REAL_CLOCK,
  ) {}

  readonly #running = new Map<string, AbortController>(); // engine name: its read-ahead

  /** Reads `plan`'s weights once in the background, unless a read-ahead of it runs; until `end` or `signal`. */
  begin(plan: EnginePlan, signal: AbortSignal, say: Say): void {
    if (this.#running.has(plan.name)) return;
    const ahead = new AbortController();
    this.#running.set(plan.name, ahead);
    void this.read(plan, AbortSignal.any([ahead.signal, signal]), say)
      .finally(() =>
        this.#running.get(plan.name) === ahead &&
        this.#running.delete(plan.name)
      );
  }

  end(name: string): void {
    this.#running.get(name)?.abort();
  }

  /** An engine that starts loading (`plan`), or whose load is over (null). */
  loading(name: string, plan: EnginePlan | null): void {
    const dev = plan && deviceOf(plan);
    if (dev == null) this.#loading.delete(name);
    else this.#loading.set(name, dev);
  }

  /** Reads `plan`'s weights until done or `signal`; `say` names why it read less. Resolves to the bytes read. */
  async read(plan: EnginePlan, signal: AbortSignal, say: Say): Promise<number> {
    const path = `${plan.directory}/models/${plan.card.local}`;
    let files: string[] | null, available: number;
    try {
      files = plan.card.readAhead === false ? null : weightFiles(path);
      if (!files?.length) return 0; // off, or a hub id the engine fetches
      const kib = /^MemAvailable:\s+(\d+) kB/m.exec(this.meminfo())?.[1];
      if (kib === undefined) {
        throw new Error("no MemAvailable in /proc/meminfo");
      }
      available = Number(kib) * 1024;
    } catch (error) {
      say(`no read-ahead: ${oneLine(error)}`, true);
      return 0;
    }
    const dev = deviceOf(plan);
    const rival = () =>
      [...this.#loading].find(([n, d]) => n !== plan.name && d === dev)?.[0];
    const budget = available - READ_AHEAD_MARGIN;
    const margin = mib(READ_AHEAD_MARGIN);
    const why = `MemAvailable ${mib(available)} less a ${margin} margin`;
    if (budget <= 0) return say(`no read-ahead: ${why}`, true), 0;
    const began = this.clock.now();
    const buffer = new Uint8Array(CHUNK);
    let read = 0;
    const end = (what: string, skipped = true) => {
      const s = ((this.clock.now() - began) / 1000).toFixed(1);
      return say(`read-ahead ${what}: ${mib(read)} in ${s} s`, skipped), read;
    };
    try {
      for (const file of files) {
        using handle = await Deno.open(file);
        for (;;) {
          if (signal.aborted) return end("ended");
          const other = rival();
          if (other) {
            return end(`stopped (engine ${other} loads from its disk)`);
          }
          if (read >= budget) return end(`stopped at ${why}`);
          const n = await handle.read(buffer.subarray(0, budget - read));
          if (n === null) break;
          read += n;
        }
      }
    } catch (error) {
      return end(`failed (${oneLine(error)})`);
    }
    return end(`of ${path}`, false);
  }
}

function deviceOf(plan: EnginePlan): number | null {
  try {
    return Deno.statSync(`${plan.directory}/models/${plan.card.local}`).dev;
  } catch {
    return null; // a hub id: nothing local to compete with
  }
}
