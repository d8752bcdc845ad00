/**
 * A launcher killed with SIGKILL: its watchdog stops every engine and
 * grandchild, or, with the watchdog stopped too, the next start reaps them;
 * a new launcher starts at once on the same ports. Its own file beside
 * supervision_test.ts: the suite's longest files run side by side.
 */
import assert from "node:assert/strict";
import {
  childrenNamed,
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
  waitFor,
} from "../support/helpers.ts";
import { pidOf } from "../support/records.ts";

/** True for a process that has exited but not been waited for. */
function zombie(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z");
  } catch {
    return false;
  }
}

for (const stopWatchdog of [false, true]) {
  Deno.test(`kill -9 of the launcher${stopWatchdog ? " with its watchdog stopped" : ""}: ${stopWatchdog ? "the next start reaps" : "the watchdog stops"} every engine, and a new launcher starts at once on the same ports`, async () => {
    const root = await makeRoot();
    const bin = await fakeBin();
    const records = await Deno.makeTempDir({ prefix: "serve-rec-" });
    const port = freePorts(2);
    const args = [
      "stubborn",
      "forker",
      ...siteArgs(port, root),
      "--grace",
      "2",
    ];
    const env = {
      PATH: pathWith(bin),
      FAKE_ENGINE_RECORD_DIR: records,
      NUCLEUS_MODE: "dev",
    };
    try {
      const first = new Launcher(args, env);
      await first.ready();
      const stubborn = await pidOf(records, port + 1);
      const forker = await pidOf(records, port + 2);
      const children = [
        (await readRecord(records, port + 1))!.childPid!,
        (await readRecord(records, port + 2))!.childPid!,
      ];
      const engines = [stubborn, forker, ...children];
      assert.equal(recordNames(root).length, 2, "one record per engine");
      const [watchdog] = childrenNamed(first.child.pid, "sh");
      assert.ok(watchdog, "the launcher has a watchdog");
      if (stopWatchdog) Deno.kill(watchdog, "SIGSTOP");
      await Deno.remove(`${records}/${port + 1}.json`);
      await Deno.remove(`${records}/${port + 2}.json`);
      first.child.kill("SIGKILL");
      await first.exited();
      if (!stopWatchdog) {
        await waitFor(
          () => engines.every((pid) => !pidAlive(pid)),
          "every engine and grandchild gone",
          // --grace 2, then SIGKILL: the rest is slack for a loaded machine.
          10_000,
        );
      } else {
        assert.ok(engines.every(pidAlive), "nothing stopped them yet");
      }
      // A new launcher on the same directory and ports, at once.
      const second = new Launcher(args, env);
      try {
        await second.ready();
        if (stopWatchdog) {
          assert.match(
            second.stderr,
            /engine stubborn \(pid \d+\) outlived its launcher \(pid \d+, gone\): stopping it/,
          );
          // Reaped means dead; the zombies are init's to collect.
          await waitFor(
            () => engines.every((pid) => !pidAlive(pid) || zombie(pid)),
            "every engine and grandchild reaped",
            2_000,
          );
        }
        await waitFor(async () => {
          const body = await models(port, true);
          return body.active.stubborn?.healthy === true &&
            body.active.forker?.healthy === true;
        }, "both engines healthy under the new launcher");
        const fresh = await pidOf(records, port + 1);
        assert.ok(!engines.includes(fresh));
      } finally {
        await second.stop();
      }
      if (stopWatchdog) Deno.kill(watchdog, "SIGKILL");
    } finally {
      for (const dir of [root, bin, records]) {
        await Deno.remove(dir, { recursive: true }).catch(() => {});
      }
    }
  });
}
