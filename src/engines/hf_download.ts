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

/** Bytes in one repository's `*.incomplete` blobs, or null when there are none. */
export function incompleteBytes(cache: string, hubId: string): number | null {
  const blobs = `${cache}/models--${hubId.replaceAll("/", "--")}/blobs`;
  let total: number | null = null;
  try {
    for (const entry of Deno.readDirSync(blobs)) {
      if (!entry.name.endsWith(".incomplete")) continue;
      try {
        total = (total ?? 0) + Deno.statSync(`${blobs}/${entry.name}`).size;
      } catch {
        // Renamed between the listing and the stat: finished.
      }
    }
  } catch {
    return null;
  }
  return total;
}
