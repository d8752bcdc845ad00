/**
 * The size of a card's local weights, from `stat` alone: files are never
 * opened, so a sparse file counts by its size and a 100 GiB checkpoint costs
 * a few system calls. What the size means for a GPU is `gpu/weights_fit.ts`.
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";
import { oneLine } from "../common/one_line.ts";

/** What lies under `<directory>/models/<local>`. */
export type LocalWeights =
  /** Nothing there: the engine fetches the card's hub id. */
  | { readonly kind: "hub" }
  /** Weight files there, `bytes` in all (see {@linkcode localWeights}). */
  | {
    readonly kind: "local";
    readonly path: string;
    readonly bytes: number;
    readonly files: number;
  }
  /** There, but not readable: `reason` says why, in one line. */
  | {
    readonly kind: "unreadable";
    readonly path: string;
    readonly reason: string;
  };

/** The extensions counted as weights. */
const WEIGHTS = /\.(safetensors|bin|pt|gguf)$/;

/**
 * Sums a card's local weight files by their `stat` size. A file at
 * `<directory>/models/<local>` counts whole; in a directory, the files
 * directly in it (symbolic links followed, as a hub cache lays them out) that
 * end in `.safetensors`, `.bin`, `.pt` or `.gguf`. When the directory holds
 * `.safetensors` files only those count: many hub repositories ship the same
 * weights twice (`model.safetensors` and `pytorch_model.bin`), and vLLM and
 * SGLang load the safetensors copy, from that directory alone.
 *
 * @param card The card.
 * @param directory The launcher's root directory.
 * @returns What is there; never throws for the file system's state.
 *
 * @example
 * ```ts ignore
 * const weights = localWeights(card, "/srv/mymodel");
 * if (weights.kind === "local") console.log(weights.bytes);
 * ```
 */
export function localWeights(card: ModelCard, directory: string): LocalWeights {
  const path = `${directory}/models/${card.local}`;
  let info: Deno.FileInfo;
  try {
    info = Deno.statSync(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return { kind: "hub" };
    return { kind: "unreadable", path, reason: oneLine(error) };
  }
  if (!info.isDirectory) {
    return { kind: "local", path, bytes: info.size, files: 1 };
  }
  const sizes = new Map<string, number[]>();
  try {
    for (const entry of Deno.readDirSync(path)) {
      const kind = WEIGHTS.exec(entry.name)?.[1];
      if (kind === undefined || entry.isDirectory) continue;
      const file = Deno.statSync(`${path}/${entry.name}`);
      if (!file.isFile) continue;
      sizes.set(kind, [...sizes.get(kind) ?? [], file.size]);
    }
  } catch (error) {
    return { kind: "unreadable", path, reason: oneLine(error) };
  }
  const counted = sizes.has("safetensors")
    ? sizes.get("safetensors")!
    : [...sizes.values()].flat();
  return {
    kind: "local",
    path,
    bytes: counted.reduce((sum, size) => sum + size, 0),
    files: counted.length,
  };
}
