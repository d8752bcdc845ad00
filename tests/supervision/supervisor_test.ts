/**
 * The supervisor's own lines and deadlines through the real command line:
 * `--start-timeout` fires on time whatever `--health-interval`, and an exit
 * line of a crash loop names the engine's log.
 */
import assert from "node:assert/strict";
import { launch, pidAlive, readRecord, waitFor } from "../support/helpers.ts";

const LIFECYCLE =
  new URL("../fixtures/gpu_lifecycle.yaml", import.meta.url).pathname;

Deno.test("--start-timeout 2 stops a silent load about 2 s after its start, not at the next 10 s health round", async () => {
  await using s = await launch(["silent"], {
    catalogue: LIFECYCLE,
    args: ["--start-timeout", "2", "--health-interval", "10"],
  });
  await s.launcher.ready();
  let record: Awaited<ReturnType<typeof readRecord>>;
  await waitFor(async () => {
    record = await readRecord(s.records, s.port + 1);
    return record !== undefined;
  }, "the silent engine's start");
  const { pid } = record!;
  await s.launcher.waitForLine(
    /engine silent \(pid \d+\) has not answered 200 and wrote nothing for 2 s \(--start-timeout\): stopping it/,
    8_000,
  );
  // On time, not at the 10 s round: the run's own length, as the launcher
  // measured it, is 2.x s.
  await s.launcher.waitForLine(
    /engine silent \(pid \d+\) exit: start-timeout, then signal SIGTERM after 2\.\d s; restart 1 in 1 s/,
  );
  await waitFor(() => !pidAlive(pid), "the silent run gone");
  assert.equal((await s.launcher.stop()).code, 0);
});

Deno.test("a crash-looping engine's exit lines name its log, one line each", async () => {
  await using s = await launch(["crashloop", "crashnever"]);
  await s.launcher.ready();
  const log = `${s.root}/logs/crashloop.log`;
  const restart = await s.launcher.waitForLine(
    /engine crashloop \(pid \d+\) exit: code 3 after \d+\.\d s; restart 1 in 1 s/,
  );
  assert.ok(restart.endsWith(`; restart 1 in 1 s; log ${log}`), restart);
  const stay = await s.launcher.waitForLine(
    /engine crashnever \(pid \d+\) exit: code 3 .*; not restarted/,
  );
  assert.ok(
    stay.endsWith(
      `; not restarted (restart: never); log ${s.root}/logs/crashnever.log`,
    ),
    stay,
  );
  // The engine's own log keeps the line without naming itself.
  const text = await Deno.readTextFile(log);
  assert.match(text, /exit: code 3 after \d+\.\d s; restart 1 in 1 s\n/);
  assert.equal((await s.launcher.stop()).code, 0);
});
