// Files replaced whole, never seen half-written: the text goes to a new file
// created exclusively (`createNew` never follows a link) under an unpredictable
// name beside `path`, then a rename puts it in place.

// A name taken (by a link planted in a shared directory, or by chance) costs
// a new name; this many in a row means something is wrong with the directory.
const TRIES = 8;

function temporaryPath(path: string): string {
  const slash = path.lastIndexOf("/");
  const random = Array.from(
    crypto.getRandomValues(new Uint8Array(8)),
    (byte) => byte.toString(16).padStart(2, "0"),
  ).join("");
  return `${path.slice(0, slash + 1)}.${path.slice(slash + 1)}.${random}.tmp`;
}

/** A name taken is not ours to remove: another is tried. */
function taken(error: unknown, tries: number): boolean {
  if (!(error instanceof Deno.errors.AlreadyExists)) return false;
  if (tries < TRIES) return true;
  throw error;
}

export async function writeFileAtomic(
  path: string,
  text: string,
  options: { mode?: number } = {},
): Promise<void> {
  for (let tries = 1;; tries++) {
    const temporary = temporaryPath(path);
    try {
      await Deno.writeTextFile(temporary, text, {
        ...options,
        createNew: true,
      });
      return await Deno.rename(temporary, path);
    } catch (error) {
      if (taken(error, tries)) continue;
      await Deno.remove(temporary).catch(() => {});
      throw error;
    }
  }
}

export function writeFileAtomicSync(path: string, text: string): void {
  for (let tries = 1;; tries++) {
    const temporary = temporaryPath(path);
    try {
      Deno.writeTextFileSync(temporary, text, { createNew: true });
      return Deno.renameSync(temporary, path);
    } catch (error) {
      if (taken(error, tries)) continue;
      try {
        Deno.removeSync(temporary);
      } catch {
        // never created, or already gone
      }
      throw error;
    }
  }
}
