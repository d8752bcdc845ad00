/**
 * Issue 52 item 6: each engine's compile caches (`<root>/data/cache/<card>`,
 * src/engines/engine_plan.ts) are checked by `--dry-run` as the start uses
 * them; a bad one (a file in the way, a symlink out of the root) stops only
 * its engine, in one line naming the card and the path.
 */
import assert from "node:assert/strict";
import {
  fakeBin,
  freePorts,
  getJson,
  launch,
  makeRoot,
  pathWith,
  siteArgs,
  STAND_IN_CATALOGUE,
  waitFor,
} from "../support/helpers.ts";

const MOD = new URL("../../mod.ts", import.meta.url).pathname;

async function dryRun(root: string, bin: string): Promise<string> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--quiet",
      MOD,
      "alpha",
      "beta",
      ...siteArgs(freePorts(3), root, STAND_IN_CATALOGUE),
      "--dry-run",
    ],
    env: { NO_COLOR: "1", NUCLEUS_MODE: "dev", PATH: pathWith(bin) },
    stdin: "null",
  }).output();
  const text = new TextDecoder();
  return text.decode(out.stdout) + text.decode(out.stderr);
}

Deno.test("a file where data/cache should be, or data/cache/<card> a symlink out of the root: --dry-run names the card and the path, the start stops only that engine", async () => {
  const root = await makeRoot();
  const bin = await fakeBin();
  const outside = await Deno.makeTempDir({ prefix: "serve-outside-" });
  try {
    await Deno.writeTextFile(`${root}/data/cache`, "");
    const file = await dryRun(root, bin);
    for (const card of ["alpha", "beta"]) {
      assert.match(
        file,
        new RegExp(`${card}: .*${root}/data/cache is not a directory`),
        file,
      );
    }
    await Deno.remove(`${root}/data/cache`);
    await Deno.mkdir(`${root}/data/cache`);
    await Deno.symlink(outside, `${root}/data/cache/alpha`);
    const link = await dryRun(root, bin);
    assert.match(
      link,
      new RegExp(`alpha: .*${root}/data/cache/alpha leads out of the root`),
      link,
    );
    assert.doesNotMatch(link, /beta: .*cache/);

    await using s = await launch(["alpha", "beta"], { root });
    await s.launcher.ready();
    const state = async (name: string) =>
      ((await getJson(`http://127.0.0.1:${s.port}/models?detail=1`)).body as {
        active: Record<string, { state: string }>;
      }).active[name]?.state;
    await waitFor(async () => (await state("beta")) === "ready", "beta ready");
    assert.equal(await state("alpha"), "exited");
    const said = s.launcher.lines.filter((l) =>
      l.includes("leads out of the root")
    );
    assert.equal(said.length, 1, s.launcher.stderr);
    assert.match(said[0]!, new RegExp(`alpha.*${root}/data/cache/alpha`));
    assert.deepEqual(
      [...Deno.readDirSync(outside)],
      [],
      "nothing made outside",
    );
  } finally {
    // The launch's disposal removes the root first.
    for (const dir of [root, bin, outside]) {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  }
});
