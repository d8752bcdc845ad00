/**
 * A health poll that fails because the launcher itself cannot open a socket
 * (too many open files) is not the engine's fault: it never counts toward a
 * liveness restart, and one line names the local cause.
 */
import assert from "node:assert/strict";
import { launch, models, readRecord, waitFor } from "../support/helpers.ts";

/** Sets a process's open-files limit (soft and hard) with util-linux's prlimit. */
async function setOpenFiles(pid: number, soft: number, hard: number) {
  const { code, stderr } = await new Deno.Command("prlimit", {
    args: [`--pid=${pid}`, `--nofile=${soft}:${hard}`],
    stdout: "null",
    stderr: "piped",
  }).output();
  assert.equal(code, 0, new TextDecoder().decode(stderr));
}

Deno.test("a health poll that fails for want of a file descriptor never restarts the engine", async () => {
  await using s = await launch(["closer"], {
    args: ["--health-interval", "0.1", "--liveness-failures", "2"],
  });
  await s.launcher.ready();
  await waitFor(
    async () => (await models(s.port, true)).active.closer?.state === "ready",
    "closer ready",
  );
  const pid = (await readRecord(s.records, s.port + 1))!.pid;
  const launcher = s.launcher.child.pid;
  const open = [...Deno.readDirSync(`/proc/${launcher}/fd`)].length;
  const limits = await Deno.readTextFile(`/proc/${launcher}/limits`);
  const hard = Number(/^Max open files\s+\d+\s+(\d+)/m.exec(limits)?.[1]);
  assert.ok(hard > open);
  // Well below what is open: the count read above may hold sockets that come
  // and go (a poll's, a traffic read's), so just under it could leave a slot
  // free once they close. Every new socket fails with EMFILE, while the
  // descriptors already open keep working.
  await setOpenFiles(launcher, Math.floor(open / 2), hard);
  try {
    await s.launcher.waitForLine(
      /health poll of engine closer failed on the launcher's side, not counted against the engine: .*Too many open files/i,
      10_000,
    );
    await new Promise((r) => setTimeout(r, 1_000)); // ≥ 10 polls at 0.1 s
  } finally {
    await setOpenFiles(launcher, hard, hard);
  }
  const lines = s.launcher.lines.filter((l) =>
    l.includes("failed on the launcher's side")
  );
  assert.equal(lines.length, 1, "one line per 10 s, not one per poll");
  assert.doesNotMatch(s.launcher.stderr, /failed \d+ health polls in a row/);
  assert.doesNotMatch(s.launcher.stderr, /engine closer .* exit:/);
  await waitFor(
    async () => {
      try {
        const entry = (await models(s.port, true)).active.closer;
        return entry?.state === "ready" && entry.restarts === 0;
      } catch {
        return false; // the API's accept loop is backing off
      }
    },
    "the API answers again, the engine never restarted",
    5_000,
  );
  assert.equal((await readRecord(s.records, s.port + 1))?.pid, pid);
  assert.equal(s.launcher.status, undefined, "the launcher lives");
});
