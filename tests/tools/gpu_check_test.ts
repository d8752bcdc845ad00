/**
 * `deno task gpu-check` (tools/gpu_check.ts) against the stand-ins: the first
 * part of the scenarios passes through the real CLI (the others:
 * gpu_check_more_test.ts, gpu_check_vllm_test.ts, run side by side), and
 * they are every scenario; without `nvidia-smi` it exits 3 with
 * one line. Each run gets its own TMPDIR, which must be empty of all but the
 * report afterwards, and no process may still carry it. A deliberately failed
 * scenario: gpu_check_failure_test.ts; its engine: gpu_engine_test.ts.
 */
import assert from "node:assert/strict";
import { isLlamaServerBuilt } from "../../tools/llama_server.ts";
import {
  rows,
  runCheck,
  STAND_IN_PARTS,
  standInPart,
} from "../support/gpu_check_run.ts";

Deno.test("gpu-check --stand-in, first part: shares, a crash during load, a foreign holder, the launcher killed, llama.cpp on CUDA, through the real CLI, said to be no GPU measurement", async () => {
  const run = await standInPart(STAND_IN_PARTS[0]);
  const llama = isLlamaServerBuilt() ? "PASS" : "SKIP";
  assert.deepEqual(
    Object.fromEntries(rows(run.report!)),
    {
      shares: "PASS",
      "crash-during-load": "PASS",
      "foreign-holder": "PASS",
      "launcher-killed": "PASS",
      "llama-cuda": llama,
    },
    run.report,
  );
  // Three crashes, each restarted only after the dead pid left the stand-in's
  // list (the scenario's own PASS above); the release was seen to take time.
  // Its length is not asserted: polls on a loaded machine blur it (1.34 s was
  // once seen for the stand-in's 1.5 s).
  const release =
    /\| exit → nvidia-smi no longer lists the pid \(release\) \| ([\d.]+) \//
      .exec(run.report!);
  assert.ok(release, run.report);
  assert.ok(Number(release[1]) > 0, `release min ${release[1]} s`);
});

Deno.test("gpu-check without nvidia-smi exits 3 with one line and writes nothing; bad input exits 2 with one line", async () => {
  const empty = await Deno.makeTempDir({ prefix: "serve-nopath-" });
  try {
    const run = await runCheck([], { PATH: empty });
    assert.equal(run.code, 3);
    assert.equal(
      run.stderr,
      "gpu-check: no NVIDIA GPU here (nvidia-smi is not on PATH); run it on a machine with one, or use --stand-in\n",
    );
    assert.equal(run.report, undefined);
  } finally {
    await Deno.remove(empty, { recursive: true });
  }
  const bad = await runCheck(["--stand-in"], {}, false);
  assert.equal(bad.code, 2);
  assert.equal(
    bad.stderr,
    "gpu-check: --stand-in needs --report PATH (bench/results/gpu.md is for a real GPU's report)\n",
  );
  const unknown = await runCheck(["--stand-in", "--only", "nope"]);
  assert.equal(unknown.code, 2);
  assert.match(
    unknown.stderr,
    /^gpu-check: --only: no scenario 'nope' \(expected shares, /,
  );
  // The parts the stand-in tests run (this file and its two siblings) are every scenario.
  const listed = /\(expected ([^)]*)\)/.exec(unknown.stderr)![1]!
    .replace(/ or /, ", ").split(/, /).map((id) => id.trim()).sort();
  assert.deepEqual(STAND_IN_PARTS.join(",").split(",").sort(), listed);
});
