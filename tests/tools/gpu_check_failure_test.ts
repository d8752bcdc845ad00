/**
 * `deno task gpu-check`: a deliberately failed scenario leaves no process
 * behind and the others still run (its own file: the suite's longest files
 * run side by side).
 */
import assert from "node:assert/strict";
import { rows, runCheck } from "../support/gpu_check_run.ts";

Deno.test("gpu-check: a deliberately failed scenario says what it expected and saw, leaves no engine behind, and the others still run", async () => {
  const run = await runCheck([
    "--stand-in",
    "--only",
    "shares,launcher-killed",
    "--break",
    "shares",
  ]);
  assert.equal(run.code, 1, run.stdout + run.stderr);
  assert.match(
    run.stdout,
    /^FAIL shares: expected a failure \(--break\); saw the scenario's own expectations all met$/m,
  );
  assert.match(run.stdout, /^PASS launcher-killed: /m);
  assert.deepEqual(
    Object.fromEntries(rows(run.report ?? "")),
    { shares: "FAIL", "launcher-killed": "PASS" },
  );
  assert.doesNotMatch(run.report ?? "", /left behind/);
  assert.deepEqual(run.left, []);
  assert.deepEqual(run.running, [], "no engine left running");
});
