/** Cards and pools for the GPU placement tests, built through the real catalogue validation. */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { type ModelCard, Registry } from "../../src/catalogue.ts";
import type { GpuAssignment, GpuPool } from "../../src/gpu/layout.ts";
import { GpuPlacementError } from "../../src/gpu/need.ts";
import { footprintKey } from "../../src/gpu/footprint_book.ts";

/**
 * A catalogue's YAML text from a `models:` mapping, each card a `chat` model
 * from hub `org/<name>` unless its fields say otherwise.
 */
export function catalogueText(
  models: Record<string, Record<string, unknown>>,
): string {
  const filled: Record<string, Record<string, unknown>> = {};
  for (const [name, fields] of Object.entries(models)) {
    filled[name] = { verb: "chat", hub: `org/${name}`, ...fields };
  }
  return stringify({ models: filled });
}

/** Cards from a `models:` mapping, through the real catalogue validation. */
export function catalogue(
  models: Record<string, Record<string, unknown>>,
): Registry {
  return Registry.parse(catalogueText(models), "gpus.yaml");
}

/** One card named `m` with these fields. */
export function card(fields: Record<string, unknown>): ModelCard {
  return catalogue({ m: fields }).get("m");
}

export function pool(entries: string, explicit = true): GpuPool {
  return { entries: entries.split(","), explicit };
}

export function range(low: number, high: number, explicit = true): GpuPool {
  const entries: string[] = [];
  for (let i = low; i <= high; i++) entries.push(String(i));
  return { entries, explicit };
}

/** The devices per card name, `null` for not placed. */
export function devices(
  placed: Map<string, GpuAssignment>,
): Record<string, string[] | null> {
  const out: Record<string, string[] | null> = {};
  for (const [name, assignment] of placed) {
    out[name] = assignment.devices === null ? null : [...assignment.devices];
  }
  return out;
}

/** Runs `fn`, which must throw a one-line GpuPlacementError; returns its message. */
export function refusal(fn: () => unknown): string {
  try {
    fn();
  } catch (error) {
    assert.ok(error instanceof GpuPlacementError, String(error));
    assert.equal(error.name, "GpuPlacementError");
    assert.ok(!/[\r\n]/.test(error.message), error.message);
    return error.message;
  }
  assert.fail("expected a GpuPlacementError");
}

/** The catalogue shipped with the package. */
export const shipped = await Registry.load();
export function shippedCards(...names: string[]): ModelCard[] {
  return names.map((name) => shipped.get(name));
}

/**
 * Writes the footprint book a start would have left under `root`: `mib`
 * measured per card of `models` on the stand-in's H100s, each entry's
 * footprint made plain (total only) and then given `parts(name, total)`.
 */
export async function seedFootprints(
  root: string,
  models: Record<string, Record<string, unknown>>,
  mib: Record<string, number>,
  parts: (name: string, total: number) => Record<string, unknown> = () => ({}),
): Promise<void> {
  const cards = catalogue(models);
  const entries = Object.entries(mib).map(([name, total]) => ({
    key: footprintKey(cards.get(name)),
    device: "NVIDIA H100 80GB HBM3",
    footprint: {
      weights_mib: null,
      kv_cache_mib: null,
      kv_tokens: null,
      graphs_mib: null,
      compute_mib: null,
      total_mib: total,
      device: "CUDA0",
      measured_at: "2026-12-01T12:00:00.000Z",
      from: "load lines",
      ...parts(name, total),
    },
  }));
  await Deno.writeTextFile(
    `${root}/data/footprints.json`,
    JSON.stringify({ format: "mymodel-serve footprints 1", entries }),
  );
}
