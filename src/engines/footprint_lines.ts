// What a run's own lines say it took, folded by its kind's `memory` rules
// into parts, and with nvidia-smi's per-process figure into a Footprint. The
// rules match each line's stable core, never its prefix (timestamps, ranks,
// function names drift between versions).
import type { Footprint } from "./footprint.ts";
import type { MemoryPart, MemoryRule } from "./kinds/engine_kind.ts";

const MIB_PARTS = ["weights", "kv_cache", "graphs", "compute"] as const;

export class FootprintLines {
  parts: Partial<Record<MemoryPart, number>> = {};
  /** Device names its lines gave, `CPU_Mapped` as `CPU`, in order. */
  devices: string[] = [];
  readonly #rules: readonly MemoryRule[];

  constructor(rules: readonly MemoryRule[] | undefined) {
    this.#rules = rules ?? [];
  }

  /** True when the line filled a part. */
  line(text: string): boolean {
    let seen = false;
    for (const { match, part, unit, anew } of this.#rules) {
      const m = match.exec(text);
      if (!m) continue;
      if (anew && Object.keys(this.parts).some((p) => p !== part)) {
        this.parts = {};
        this.devices = [];
      }
      const value = m.slice(1).map((n) => Number(n?.replaceAll(",", "")))
        .filter(Number.isFinite).reduce((a, b) => a + b, 0) *
        (unit === "GiB" ? 1024 : 1);
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
