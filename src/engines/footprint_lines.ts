// What a run's own lines say it took, folded by its kind's `memory` rules
// into parts, and with nvidia-smi's per-process figure into a Footprint. The
// rules are anchored at each engine's log prefix (kinds/*.ts).
import type { Footprint } from "./footprint.ts";
import type { MemoryPart, MemoryRule } from "./kinds/engine_kind.ts";
import { log } from "../common/log.ts";

const MIB_PARTS = ["weights", "kv_cache", "graphs", "compute"] as const;
// `400,000` tokens; never `1e20`, `nan`, `1.2.3`.
const FIGURE = /^\d[\d,]*(?:\.\d+)?$/;

export class FootprintLines {
  parts: Partial<Record<MemoryPart, number>> = {};
  /** Device names its lines gave, `CPU_Mapped` as `CPU`, in order. */
  devices: string[] = [];
  /** The largest MiB one line may name: its device's total (each line is one device's), asked as lines come. */
  ceilingMiB: () => number = () => Infinity;
  readonly #rules: readonly MemoryRule[];
  readonly #name: string;
  #warned = false;

  /** `name`: the engine's, for the warning on a figure dropped. */
  constructor(rules: readonly MemoryRule[] | undefined, name = "?") {
    this.#rules = rules ?? [];
    this.#name = name;
  }

  /** True when the line filled a part. */
  line(text: string): boolean {
    let seen = false;
    for (const { match, part, unit, anew } of this.#rules) {
      const m = match.exec(text);
      if (!m) continue;
      const value = this.#value(m, part, unit === "GiB" ? 1024 : 1);
      if (value === undefined) continue;
      if (anew && Object.keys(this.parts).some((p) => p !== part)) {
        this.parts = {};
        this.devices = [];
      }
      const had = this.parts[part] ?? 0;
      this.parts[part] = part === "kv_tokens"
        ? Math.max(had, value)
        : had + value;
      const device = m.groups?.device?.split("_")[0];
      if (device && !this.devices.includes(device)) this.devices.push(device);
      seen = true;
    }
    return seen;
  }

  /** Its figures' sum in MiB (or tokens); undefined, with one warning a run, when one is no figure or past the ceiling. */
  #value(
    m: RegExpExecArray,
    part: MemoryPart,
    scale: number,
  ): number | undefined {
    const texts = m.slice(m.groups?.device === undefined ? 1 : 2)
      .filter((text) => text !== undefined);
    const limit = part === "kv_tokens" ? Infinity : this.ceilingMiB();
    const numbers = texts.map((text) =>
      FIGURE.test(text) ? Number(text.replaceAll(",", "")) * scale : NaN
    );
    const bad = numbers.findIndex((n) => !(Number.isFinite(n) && n <= limit));
    if (bad < 0) return numbers.reduce((sum, n) => sum + n, 0);
    if (!this.#warned) {
      this.#warned = true;
      const most = Number.isFinite(limit)
        ? ` of MiB up to ${limit}, its device's total`
        : "";
      const [figure, line] = [texts[bad]!.slice(0, 40), m[0].slice(0, 200)];
      log.warn(
        `engine ${this.#name}: a load line's figure "${figure}" ignored (expected a number${most}): ${line}`,
      );
    }
    return undefined;
  }
}

const round = (mib: number) => Math.round(mib * 100) / 100;

/**
 * The lines' parts, and `gpuMib` (nvidia-smi's MiB per device) as the total
 * where larger than their sum; null when neither knows anything. The device is
 * the lines' accelerators (`CUDA0,CUDA1`), else `CPU` when only it was named.
 */
export function footprintOf(
  lines: FootprintLines,
  gpuMib: Readonly<Record<string, number>> | null | undefined,
  at: Date,
): Footprint | null {
  const { parts, devices } = lines;
  const mibs = Object.values(gpuMib ?? {});
  const smi = mibs.length > 0 ? mibs.reduce((a, b) => a + b) : null;
  const printed = Object.keys(parts).length > 0;
  if (!printed && smi === null) return null;
  const known = MIB_PARTS.filter((part) => parts[part] !== undefined);
  const sum = known.reduce((a, part) => a + parts[part]!, 0);
  const mib = (part: MemoryPart) =>
    parts[part] === undefined ? null : round(parts[part]);
  const accelerators = devices.filter((device) => device !== "CPU");
  return {
    weights_mib: mib("weights"),
    kv_cache_mib: mib("kv_cache"),
    kv_tokens: parts.kv_tokens ?? null,
    graphs_mib: mib("graphs"),
    compute_mib: mib("compute"),
    total_mib: known.length > 0 || smi !== null
      ? round(Math.max(sum, smi ?? 0))
      : null,
    device: accelerators.join(",") || (devices.length > 0 ? "CPU" : null),
    measured_at: at.toISOString(),
    from: [printed && "load lines", smi !== null && "nvidia-smi"]
      .filter(Boolean).join(" + "),
  };
}

/** The last footprint handed on: a new one counts when a figure changed (its time aside). */
export class FootprintSeen {
  last: Footprint | null = null;

  changed(next: Footprint | null): next is Footprint {
    const figures = (f: Footprint | null) =>
      JSON.stringify(f && { ...f, measured_at: null });
    if (next === null || figures(next) === figures(this.last)) return false;
    this.last = next;
    return true;
  }
}
