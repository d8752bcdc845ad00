/**
 * Stopping an engine's group (src/engines/process_group.ts): a kind whose
 * engine exits only at a second SIGTERM (llama-server, tools/server/server.cpp
 * `signal_handler`) gets one within the grace, not SIGKILL after it.
 */
import assert from "node:assert/strict";
import { stopGroup } from "../../src/engines/process_group.ts";
import { Registry } from "../../src/catalogue.ts";
import { ServerProcess } from "../../src/serve.ts";
import { planEngine } from "../../src/engines/engine_plan.ts";
import { procStats } from "../../src/engines/proc.ts";
import { within } from "../../src/common/sleep.ts";
import { captureLog, makeRoot, pathWith } from "../support/helpers.ts";

// Ignores the first SIGTERM, exits 7 at the second, as llama-server does with a connection open.
const TWICE =
  "trap 'if [ -n \"$seen\" ]; then exit 7; fi; seen=1' TERM; echo up; while :; do sleep 0.05; done";

Deno.test("stopGroup sends SIGTERM again after againMs: an engine that needs two exits without SIGKILL", async () => {
  const child = new Deno.Command("sh", {
    args: ["-c", TWICE],
    stdout: "piped",
    detached: true,
  }).spawn();
  const reader = child.stdout.getReader();
  await reader.read(); // its trap is set
  reader.releaseLock();
  let killed = false;
  await stopGroup(child.pid, 5_000, {
    againMs: 300,
    onKill: () => killed = true,
  });
  const status = await child.status;
  await child.stdout.cancel();
  assert.equal(killed, false, "no SIGKILL");
  assert.equal(status.code, 7, "ended by its second SIGTERM");
});

Deno.test("a setsid on PATH that makes no new session changes nothing: the engine leads its own group and a stop ends it", async () => {
  // A `setsid` that only execs its argument: the engine would share the
  // launcher's group, kill(-pid) fail with ESRCH and the stop wait forever.
  const bin = await Deno.makeTempDir({ prefix: "serve-setsid-" });
  const root = await makeRoot();
  await Deno.writeTextFile(`${bin}/setsid`, '#!/bin/sh\nexec "$@"\n', {
    mode: 0o755,
  });
  const card = Registry.parse(
    `models:\n  g: { verb: chat, engine: command, hub: org/g, command: [sh, -c, "echo up; while :; do sleep 0.05; done", "{name}"] }\n`,
  ).get("g");
  const engine = new ServerProcess(planEngine(card, {
    baseEnv: { PATH: pathWith(bin) },
    host: "127.0.0.1",
    port: 5001,
    directory: root,
  }));
  try {
    await captureLog(async () => {
      engine.start();
      const pid = engine.pid!;
      assert.equal(procStats([pid]).get(pid)?.pgid, pid, "its own group");
      const stopped = await within(engine.stop(2_000).then(() => true), 10_000);
      if (!stopped) Deno.kill(pid, "SIGKILL");
      assert.equal(stopped, true, "the stop ended within its grace");
      assert.equal((await engine.ended).signal, "SIGTERM");
    });
  } finally {
    await Deno.remove(bin, { recursive: true });
    await Deno.remove(root, { recursive: true });
  }
});
