// What one run of an engine took in memory, as the engine itself printed it
// at load (its buffer and KV cache lines) or as nvidia-smi saw its processes:
// measured, never estimated. Plain data: the detail view shows it, the
// metrics export it, the footprint book remembers it per card and device.

/**
 * One run's memory, in MiB; a part the engine did not print is null.
 *
 * @example
 * ```ts
 * import type { Footprint } from "./footprint.ts";
 *
 * const seen: Footprint = {
 *   weights_mib: 129.05, kv_cache_mib: 16, kv_tokens: 256, graphs_mib: null,
 *   compute_mib: 17.01, total_mib: 162.06, device: "CPU",
 *   measured_at: "2026-12-01T12:00:00.000Z", from: "load lines",
 * };
 * ```
 */
export interface Footprint {
  /** The weights (llama.cpp's model buffers). */
  readonly weights_mib: number | null;
  /** The KV cache (llama.cpp's KV buffers). */
  readonly kv_cache_mib: number | null;
  /** Tokens its KV cache holds. */
  readonly kv_tokens: number | null;
  /** CUDA graphs (vLLM, SGLang). */
  readonly graphs_mib: number | null;
  /** Activations and scratch (llama.cpp's compute buffers). */
  readonly compute_mib: number | null;
  /** The parts' sum, or nvidia-smi's per-process figure where larger. */
  readonly total_mib: number | null;
  /** What it keeps asleep (`sleep_after`), measured at its last sleep: `total_mib` stays its awake figure. */
  readonly residue_mib?: number | null;
  /** Where it lives: the engine's device name (`CPU`, `CUDA0`) or nvidia-smi's GPU name. */
  readonly device: string | null;
  /** ISO time of the last figure. */
  readonly measured_at: string;
  /** `load lines`, `metrics`, `nvidia-smi`, or several joined by ` + `. */
  readonly from: string;
}

/**
 * What a run on `devices` took on each: a tensor-parallel run's figures (its
 * ranks' lines and nvidia-smi's MiB, summed over its devices) split evenly.
 *
 * @example `perDevice(f, ["0", "1"]).total_mib` is half of `f.total_mib`.
 */
export function perDevice(
  footprint: Footprint,
  devices: readonly string[],
): Footprint {
  const n = Math.max(1, devices.length);
  const parts = ["weights_mib", "kv_cache_mib", "graphs_mib", "compute_mib"];
  const split = [...parts, "total_mib", "residue_mib"].filter((part) =>
    part in footprint
  ).map((part) => {
    const mib = footprint[part as "total_mib"];
    return [part, mib === null ? null : Math.round((mib / n) * 100) / 100];
  });
  return { ...footprint, ...Object.fromEntries(split) };
}
