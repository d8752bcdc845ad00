/**
 * A refused start, checked the way an operator sees it: a start and a
 * `--dry-run` run at once and must both exit with the same one line, start
 * no engine, listen on nothing and write nothing under the root.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  fakeBin,
  freePorts,
  Launcher,
  listDir,
  listening,
  makeRoot,
  pathWith,
  siteArgs,
  STAND_IN_CATALOGUE,
} from "./helpers.ts";

export interface Refusal {
  /** Launcher arguments after the models and the site's flags. */
  extra?: string[];
  /** Environment added to the stand-in's. */
  env?: Record<string, string>;
  /** A catalogue of the test's own; `null` for the shipped one. @default {the stand-in catalogue} */
  catalogue?: string | null;
  /** Prepares the root directory (made with its four subdirectories). */
  root?: (root: string) => Promise<void> | void;
  /** The exit code: 1 for input, 2 for the command line. */
  code?: number;
  /** Leave out `--host`: `NUCLEUS_HOST` (or the default) decides. */
  withoutHost?: boolean;
}

/**
 * Runs a start and a dry run of `models` at once, and checks both refuse with
 * the same one line matching `says` and the same exit code; nothing started,
 * listened on or written.
 */
export async function refused(
  models: string[],
  says: RegExp,
  options: Refusal = {},
): Promise<string> {
  const root = await makeRoot();
  await options.root?.(root);
  const bin = await fakeBin();
  const records = await Deno.makeTempDir({ prefix: "serve-rec-" });
  const port = freePorts(models.length);
  const env = {
    PATH: pathWith(bin),
    FAKE_ENGINE_RECORD_DIR: records,
    NUCLEUS_MODE: "dev",
    ...options.env,
  };
  const site = siteArgs(
    port,
    root,
    options.catalogue === undefined ? STAND_IN_CATALOGUE : options.catalogue,
  );
  if (options.withoutHost) site.splice(site.indexOf("--host"), 2);
  const args = [...models, ...site, ...options.extra ?? []];
  const start = new Launcher(args, env);
  const dry = new Launcher([...args, "--dry-run"], env);
  const guard = setTimeout(() => {
    start.stop();
    dry.stop();
  }, 30_000);
  try {
    const [startStatus, dryStatus] = await Promise.all([
      start.exited(),
      dry.exited(),
    ]);
    const lines = [start, dry].map((run) => {
      const lines = run.lines.filter((l) => l.trim() !== "");
      assert.equal(lines.length, 1, `one line, got:\n${run.stderr}`);
      return lines[0]!;
    });
    assert.equal(startStatus.code, options.code ?? 1, start.stderr);
    assert.equal(dryStatus.code, options.code ?? 1, dry.stderr);
    assert.equal(lines[0], lines[1]);
    assert.match(lines[0]!, says);
    assert.deepEqual(listDir(records), [], "no engine started");
    for (const sub of ["logs", "data", "metrics"]) {
      assert.deepEqual(listDir(`${root}/${sub}`), [], `nothing in ${sub}/`);
    }
    for (let p = port; p <= port + models.length; p++) {
      assert.ok(!(await listening(p)), `nothing listens on ${p}`);
    }
    return lines[0]!;
  } finally {
    clearTimeout(guard);
    await start.stop();
    await dry.stop();
    await Deno.chmod(root, 0o755).catch(() => {});
    for (const dir of [root, bin, records]) {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  }
}

/** A catalogue file holding `text`, removed on dispose. */
export async function catalogueFile(
  text: string,
): Promise<{ path: string } & AsyncDisposable> {
  const path = await Deno.makeTempFile({ suffix: ".yaml" });
  await Deno.writeTextFile(path, text);
  return {
    path,
    async [Symbol.asyncDispose]() {
      await Deno.remove(path).catch(() => {});
    },
  };
}
