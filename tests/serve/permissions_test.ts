/**
 * The launcher under exactly the narrowed permissions of `deno task start`
 * (read from deno.json): everything supervision, placement and the connection
 * guard need must be granted there.
 */
import assert from "node:assert/strict";
import {
  fakeBin,
  freePorts,
  Launcher,
  makeRoot,
  models,
  pathWith,
  pidAlive,
  readRecord,
  recordNames,
  siteArgs,
  STAND_IN_CATALOGUE,
  waitFor,
} from "../support/helpers.ts";

const DENO_JSON = new URL("../../deno.json", import.meta.url);

/** The `start` task's `deno run` flags, `$MY_LOCAL` replaced by `root`. */
async function startFlags(root: string): Promise<string[]> {
  const config = JSON.parse(await Deno.readTextFile(DENO_JSON));
  // The task checks that MY_LOCAL is set, then runs `deno run … mod.ts`.
  const run = (config.tasks.start as string).split(" && ").at(-1)!;
  const words = run.split(/\s+/);
  assert.deepEqual(words.slice(0, 2), ["deno", "run"]);
  assert.equal(words.at(-1), "mod.ts");
  return words.slice(2, -1).map((w) => w.replaceAll("$MY_LOCAL", root));
}

Deno.test("under deno task start's permissions: records, watchdog, GPU detection, restarts and a clean stop all work", async () => {
  const root = await makeRoot();
  const bin = await fakeBin(["vllm"]);
  await Deno.writeTextFile(
    `${bin}/nvidia-smi`,
    "#!/bin/sh\nprintf '0\\n1\\n'\n",
    { mode: 0o755 },
  );
  const records = await Deno.makeTempDir({ prefix: "serve-rec-" });
  // The catalogue must sit where the task may read: inside the root.
  await Deno.copyFile(STAND_IN_CATALOGUE, `${root}/catalogue.yaml`);
  const port = freePorts(2);
  const flags = await startFlags(root);
  const launcher = new Launcher([
    "alpha",
    "crash1",
    ...siteArgs(port, root, `${root}/catalogue.yaml`),
  ], {
    PATH: pathWith(bin),
    FAKE_ENGINE_RECORD_DIR: records,
    NUCLEUS_MODE: "dev",
  }, flags);
  try {
    await launcher.ready();
    assert.doesNotMatch(launcher.stderr, /NotCapable|Requires .* access/);
    assert.doesNotMatch(launcher.stderr, /cannot start the watchdog/);
    assert.match(launcher.stderr, /GPU pool 0-1 \(from nvidia-smi\)/);
    assert.match(launcher.stderr, /open files: limit \d+/);
    await waitFor(
      () => recordNames(root).includes("alpha.engine.json"),
      "alpha's record",
    );
    const record = JSON.parse(
      await Deno.readTextFile(`${root}/data/alpha.engine.json`),
    );
    assert.notEqual(record.startTime, "", "start time read from /proc");
    await launcher.waitForLine(/engine crash1 .* restart 1 in 1 s/);
    await waitFor(
      async () => (await models(port, true)).active.crash1?.restarts === 1,
      "crash1 restarted",
    );
    const alpha = (await readRecord(records, port + 1))!.pid;
    assert.equal((await launcher.stop("SIGTERM")).code, 0);
    await waitFor(() => !pidAlive(alpha), "engine gone", 3_000);
    assert.deepEqual(recordNames(root), []);
  } finally {
    await launcher.stop();
    for (const dir of [root, bin, records]) {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  }
});

Deno.test("under deno task start's permissions a reload reads the catalogue", async () => {
  const root = await makeRoot();
  const bin = await fakeBin(["vllm"]);
  await Deno.copyFile(STAND_IN_CATALOGUE, `${root}/catalogue.yaml`);
  const port = freePorts(1);
  const launcher = new Launcher(
    [
      "alpha",
      ...siteArgs(port, root, `${root}/catalogue.yaml`),
    ],
    { PATH: pathWith(bin), NUCLEUS_MODE: "dev" },
    await startFlags(root),
  );
  try {
    await launcher.ready();
    launcher.child.kill("SIGHUP");
    await launcher.waitForLine(/reload: nothing changed/);
    assert.doesNotMatch(launcher.stderr, /NotCapable|Requires .* access/);
  } finally {
    await launcher.stop();
    for (const dir of [root, bin]) {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  }
});
