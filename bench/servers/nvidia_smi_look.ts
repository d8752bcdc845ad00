/**
 * One look of the stand-in `nvidia-smi` on a fake GPU machine, timed: what
 * the launcher pays per look (the GPU phase reports it; the `--dry-run`
 * phase measures against it).
 *
 * @module
 */
import type { FakeGpuMachine } from "../../tests/support/fake_gpus.ts";

/** One stand-in query as the launcher makes it (both runs at once), in ms. */
export async function standInQueryMs(machine: FakeGpuMachine): Promise<number> {
  const run = (query: string) =>
    new Deno.Command(`${machine.bin}/nvidia-smi`, {
      args: [query, "--format=csv,noheader,nounits"],
      env: machine.env,
      stdin: "null",
      stdout: "null",
      stderr: "null",
    }).output();
  const started = performance.now();
  await Promise.all([
    run("--query-gpu=index,uuid,memory.total,memory.used"),
    run("--query-compute-apps=pid,used_memory,gpu_uuid"),
  ]);
  return performance.now() - started;
}
