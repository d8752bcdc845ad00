/**
 * A download under way in the Hugging Face cache, seen from the disk:
 * `huggingface_hub` writes each file to `models--ORG--NAME/blobs/<hash>.incomplete`
 * and renames it when done (src/huggingface_hub/file_download.py,
 * `_download_to_tmp_and_move`), whatever the engine prints meanwhile.
 *
 * @module
 */

/** `HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub` (huggingface_hub/constants.py). */
export function hubCache(env: Readonly<Record<string, string>>): string {
  if (env.HF_HUB_CACHE) return env.HF_HUB_CACHE;
  if (env.HF_HOME) return `${env.HF_HOME}/hub`;
  const cache = env.XDG_CACHE_HOME || `${env.HOME ?? ""}/.cache`;
  return `${cache}/huggingface/hub`;
}

/** Blobs sized per look: a cache left with thousands of `.incomplete` blobs is never stat'ed whole at once. */
const MAX_STATS = 256;

/**
 * Bytes in one repository's `*.incomplete` blobs (the first 256 listed), or
 * null when there are none. Asynchronous: 50,000 blobs cost the event loop
 * no stall (they cost `/health` 263 ms when read synchronously).
 */
export async function incompleteBytes(
  cache: string,
  hubId: string,
): Promise<number | null> {
  const blobs = `${cache}/models--${hubId.replaceAll("/", "--")}/blobs`;
  const names: string[] = [];
  try {
    for await (const entry of Deno.readDir(blobs)) {
      if (entry.name.endsWith(".incomplete")) names.push(entry.name);
      if (names.length >= MAX_STATS) break;
    }
  } catch {
    return null;
  }
  if (names.length === 0) return null;
  let total = 0;
  for (const name of names) {
    // Renamed between the listing and the stat: finished.
    total += (await Deno.stat(`${blobs}/${name}`).catch(() => null))?.size ?? 0;
  }
  return total;
}
