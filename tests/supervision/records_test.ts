/**
 * Engine records (src/supervision/records.ts) in this process: never written
 * through a planted link.
 */
import assert from "node:assert/strict";
import { EngineRecords } from "../../src/supervision/records.ts";
import { makeRoot, waitFor } from "../support/helpers.ts";

Deno.test("an engine record is never written through a link planted at its old or a guessed temporary name", async () => {
  const root = await makeRoot();
  try {
    await Deno.mkdir(`${root}/data`, { recursive: true });
    const target = `${root}/precious.txt`;
    await Deno.writeTextFile(target, "keep me\n");
    const planted = [
      `${root}/data/m.engine.json.${Deno.pid}.tmp`,
      `${root}/data/.m.engine.json.0000000000000000.tmp`,
    ];
    for (const link of planted) await Deno.symlink(target, link);
    const records = new EngineRecords(root);
    records.write({
      model: "m",
      pid: Deno.pid,
      command: "x",
      host: "127.0.0.1",
      port: 1,
    });
    // Written in a microtask: wait for the file, not for a while.
    await waitFor(
      () =>
        Deno.lstat(`${root}/data/m.engine.json`).then(() => true, () => false),
      "the record written",
    );
    assert.equal(await Deno.readTextFile(target), "keep me\n");
    const written = await Deno.lstat(`${root}/data/m.engine.json`);
    assert.ok(written.isFile && !written.isSymlink);
    const record = JSON.parse(
      await Deno.readTextFile(`${root}/data/m.engine.json`),
    );
    assert.equal(record.pid, Deno.pid);
    // Nothing left behind but the planted links.
    const names = [...Deno.readDirSync(`${root}/data`)].map((e) => e.name)
      .sort();
    assert.deepEqual(
      names,
      ["m.engine.json", ...planted.map((p) => p.split("/").at(-1)!)].sort(),
    );
    records.remove("m");
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
