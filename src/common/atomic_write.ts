/**
 * Files replaced whole, never seen half-written: the content goes to a new
 * file created exclusively (`createNew`, which never follows a link) under an
 * unpredictable name beside `path`, then a rename puts it in place. The
 * temporary file is removed when the write or the rename fails.
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

function bytesOf(data: string | Uint8Array): Uint8Array {
  return typeof data === "string" ? new TextEncoder().encode(data) : data;
}

/** A name taken is not ours to remove: another is tried. */
function taken(error: unknown, tries: number): boolean {
  if (!(error instanceof Deno.errors.AlreadyExists)) return false;
  if (tries < TRIES) return true;
  throw error;
}

export async function writeFileAtomic(
  path: string,
  data: string | Uint8Array,
  options: { mode?: number } = {},
): Promise<void> {
  for (let tries = 1;; tries++) {
    const temporary = temporaryPath(path);
    try {
      await Deno.writeFile(temporary, bytesOf(data), {
        ...options,
        createNew: true,
      });
    } catch (error) {
      if (taken(error, tries)) continue;
      await Deno.remove(temporary).catch(() => {});
      throw error;
    }
    return await Deno.rename(temporary, path).catch(async (error) => {
      await Deno.remove(temporary).catch(() => {});
      throw error;
    });
  }
}

export function writeFileAtomicSync(
  path: string,
  data: string | Uint8Array,
  options: { mode?: number } = {},
): void {
  for (let tries = 1;; tries++) {
    const temporary = temporaryPath(path);
    try {
      Deno.writeFileSync(temporary, bytesOf(data), {
        ...options,
        createNew: true,
      });
    } catch (error) {
      if (taken(error, tries)) continue;
      removeQuietly(temporary);
      throw error;
    }
    try {
      return Deno.renameSync(temporary, path);
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
