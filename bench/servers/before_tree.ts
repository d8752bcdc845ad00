/**
 * An earlier tree of this repository, exported with `git archive COMMIT | tar
 * -x` into a directory, so the bench can run its `mod.ts` beside the current
 * one in the same run. Without git, or outside a checkout (a JSR copy), or
 * without the commit (a shallow clone), it says why instead.
 *
 * @module
 */

/** The repository this bench belongs to, when it is a local checkout. */
const REPO = new URL("../..", import.meta.url);

/** An exported tree, or why there is none. */
export type ExportedTree =
  | { dir: string; mod: string; commit: string }
  | { skipped: string };

async function git(
  args: readonly string[],
): Promise<{ ok: boolean; text: string }> {
  const out = await new Deno.Command("git", {
    args: ["-C", REPO.pathname, ...args],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decode = (bytes: Uint8Array) => new TextDecoder().decode(bytes).trim();
  return {
    ok: out.success,
    text: out.success ? decode(out.stdout) : decode(out.stderr),
  };
}

/**
 * Exports `commit` into the new directory `into` (removed by the caller).
 *
 * @param commit A commit name git understands (`34949b2`).
 * @param into A directory that does not exist yet.
 * @returns The directory and its `mod.ts`, or why the tree is not available.
 */
export async function exportTree(
  commit: string,
  into: string,
): Promise<ExportedTree> {
  if (REPO.protocol !== "file:") {
    return { skipped: `not a local checkout (${REPO.href})` };
  }
  let full: string;
  try {
    const found = await git(["rev-parse", "--verify", `${commit}^{commit}`]);
    if (!found.ok) {
      return {
        skipped: `commit ${commit} not in this checkout (${found.text})`,
      };
    }
    full = found.text;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) {
      return { skipped: "git is not installed" };
    }
    throw error;
  }
  await Deno.mkdir(into, { recursive: true });
  const archive = new Deno.Command("git", {
    args: ["-C", REPO.pathname, "archive", "--format=tar", full],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const tar = new Deno.Command("tar", {
    args: ["-x", "-C", into],
    stdin: "piped",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const [sent, archived, archiveErr, extracted] = await Promise.all([
    archive.stdout.pipeTo(tar.stdin).then(() => true, () => false),
    archive.status,
    new Response(archive.stderr).text(),
    tar.output(),
  ]);
  if (!sent || !archived.success || !extracted.success) {
    const why = archived.success
      ? new TextDecoder().decode(extracted.stderr).trim()
      : archiveErr.trim();
    return { skipped: `git archive ${commit} | tar -x failed: ${why}` };
  }
  return { dir: into, mod: `${into}/mod.ts`, commit: full.slice(0, 12) };
}
