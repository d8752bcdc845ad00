/**
 * Files replaced whole, never seen half-written: the new content goes to a
 * temporary file in the same directory, then a rename puts it in place.
 *
 * @module
 */

// A name taken (by a link planted in a shared directory, or by chance) costs
// a new name; this many in a row means something is wrong with the directory.
const TRIES = 8;

/** `.<name>.<16 random hex digits>.tmp` beside `path`: a link planted there ahead of time is never hit. */
function temporaryPath(path: string): string {
  const slash = path.lastIndexOf("/");
  const random = Array.from(
    crypto.getRandomValues(new Uint8Array(8)),
    (byte) => byte.toString(16).padStart(2, "0"),
  ).join("");
  return `${path.slice(0, slash + 1)}.${path.slice(slash + 1)}.${random}.tmp`;
}

/**
 * Writes `data` to `path` atomically: a new file created exclusively
 * (`createNew`, which never follows a link) under an unpredictable name in
 * `path`'s directory, then renamed onto `path`. The temporary file is removed
 * when the write or the rename fails.
 */
export async function writeFileAtomic(
  path: string,
  data: string | Uint8Array,
  options: { mode?: number } = {},
): Promise<void> {
  const bytes = typeof data === "string"
    ? new TextEncoder().encode(data)
    : data;
  for (let tries = 1;; tries++) {
    const temporary = temporaryPath(path);
    try {
      await Deno.writeFile(temporary, bytes, { ...options, createNew: true });
    } catch (error) {
      // Taken: not ours to remove.
      if (error instanceof Deno.errors.AlreadyExists) {
        if (tries < TRIES) continue;
        throw error;
      }
      await Deno.remove(temporary).catch(() => {});
      throw error;
    }
    try {
      await Deno.rename(temporary, path);
      return;
    } catch (error) {
      await Deno.remove(temporary).catch(() => {});
      throw error;
    }
  }
}

/** {@linkcode writeFileAtomic}, synchronously. */
export function writeFileAtomicSync(
  path: string,
  data: string | Uint8Array,
  options: { mode?: number } = {},
): void {
  const bytes = typeof data === "string"
    ? new TextEncoder().encode(data)
    : data;
  for (let tries = 1;; tries++) {
    const temporary = temporaryPath(path);
    try {
      Deno.writeFileSync(temporary, bytes, { ...options, createNew: true });
    } catch (error) {
      if (error instanceof Deno.errors.AlreadyExists) {
        if (tries < TRIES) continue;
        throw error;
      }
      removeQuietly(temporary);
      throw error;
    }
    try {
      Deno.renameSync(temporary, path);
      return;
    } catch (error) {
      removeQuietly(temporary);
      throw error;
    }
  }
}

function removeQuietly(path: string): void {
  try {
    Deno.removeSync(path);
  } catch {
    // never created, or already gone
  }
}
