/**
 * Writes the project's tiny llama model (see {@linkcode tinyLlama}) to a GGUF file.
 *
 * ```sh
 * deno run --allow-write --allow-read tools/tiny_model.ts <out.gguf> [--seed N]
 * ```
 *
 * The file appears atomically: the bytes go to a temporary file in the same
 * directory, which is synced and then renamed over the target, so no reader ever
 * sees a half-written model. Missing parent directories are created.
 *
 * @module
 */

import { basename, dirname, join } from "node:path";
import { parseArgs } from "node:util";
import { tinyLlama, type TinyLlamaOptions } from "./gguf.ts";

/**
 * Writes `bytes` to `path` atomically: into a fresh temporary file beside it,
 * synced to disk, then renamed over `path`. Creates the parent directory. On
 * failure the temporary file is removed and `path` is left as it was.
 *
 * @param path Destination file.
 * @param bytes Contents.
 * @throws {Deno.errors.PermissionDenied} without read/write permission there.
 */
export async function writeFileAtomic(
  path: string,
  bytes: Uint8Array,
): Promise<void> {
  const dir = dirname(path);
  await Deno.mkdir(dir, { recursive: true });
  const suffix = crypto.randomUUID().slice(0, 8);
  const temp = join(dir, `.${basename(path)}.${Deno.pid}.${suffix}.tmp`);
  try {
    using file = await Deno.open(temp, { write: true, createNew: true });
    let written = 0;
    while (written < bytes.length) {
      written += await file.write(bytes.subarray(written));
    }
    await file.syncData();
  } catch (error) {
    await Deno.remove(temp).catch(() => {});
    throw error;
  }
  try {
    await Deno.rename(temp, path);
  } catch (error) {
    await Deno.remove(temp).catch(() => {});
    throw error;
  }
}

/**
 * Generates the tiny llama model and writes it to `path` atomically, creating
 * the parent directory.
 *
 * @param path Destination `.gguf` file; an existing file is replaced.
 * @param options Seed and sizes, passed to {@linkcode tinyLlama}.
 * @throws {Deno.errors.PermissionDenied} without read/write permission there.
 *
 * @example
 * ```ts
 * import { writeTinyModel } from "./tiny_model.ts";
 * await writeTinyModel("/tmp/mymodel/tiny.gguf");
 * ```
 */
export async function writeTinyModel(
  path: string,
  options: TinyLlamaOptions = {},
): Promise<void> {
  await writeFileAtomic(path, tinyLlama(options));
}

const USAGE =
  "usage: deno run --allow-write --allow-read tools/tiny_model.ts <out.gguf> [--seed N]";

function usageError(detail: string): never {
  console.error(`tiny_model: ${detail}; ${USAGE}`);
  Deno.exit(2);
}

async function main(args: string[]): Promise<void> {
  let parsed;
  try {
    parsed = parseArgs({
      args,
      allowPositionals: true,
      options: {
        seed: { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (error) {
    usageError(error instanceof Error ? error.message : String(error));
  }
  if (parsed.values.help) {
    console.log(USAGE);
    return;
  }
  if (parsed.positionals.length !== 1) {
    usageError(
      `expected exactly one output path, got ${parsed.positionals.length}`,
    );
  }
  const path = parsed.positionals[0] as string;
  const options: TinyLlamaOptions = {};
  if (parsed.values.seed !== undefined) {
    const seed = Number(parsed.values.seed);
    if (!Number.isInteger(seed)) {
      usageError(`--seed must be an integer, got '${parsed.values.seed}'`);
    }
    options.seed = seed;
  }
  try {
    await writeTinyModel(path, options);
  } catch (error) {
    console.error(
      `tiny_model: Cannot write ${path}: ${
        error instanceof Error ? error.message : String(error)
      }`,
    );
    Deno.exit(1);
  }
  console.log(path);
}

if (import.meta.main) await main(Deno.args);
