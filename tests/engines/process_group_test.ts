/**
 * Stopping an engine's group (src/engines/process_group.ts): a kind whose
 * engine exits only at a second SIGTERM (llama-server, tools/server/server.cpp
 * `signal_handler`) gets one within the grace, not SIGKILL after it.
 */
import assert from "node:assert/strict";
import { stopGroup } from "../../src/engines/process_group.ts";

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
