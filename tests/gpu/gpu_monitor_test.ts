import assert from "node:assert/strict";
import {
  GpuMonitor,
  type GpuQuery,
  type GpuSnapshot,
} from "../../src/gpu/nvidia_smi.ts";
import { fakeDevices, fakeGpuMachine } from "../support/fake_gpus.ts";
import { captureLog } from "../support/helpers.ts";

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

const SKIPPED = "rules needing GPU memory facts are skipped while it fails";

Deno.test("concurrent snapshot() calls share one nvidia-smi query", async () => {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(2) });
  const monitor = new GpuMonitor({ env: gpus.env });
  const snapshots = await Promise.all(
    Array.from({ length: 20 }, () => monitor.snapshot(1000)),
  );
  assert.equal(monitor.queries, 1);
  assert.ok(snapshots[0] !== undefined);
  assert.equal(snapshots[0]!.devices.length, 2);
  for (const snapshot of snapshots) assert.equal(snapshot, snapshots[0]);
  // One round: the stand-in ran once per query kind.
  assert.equal((await gpus.calls()).length, 2);
});

Deno.test("snapshot(maxAgeMs) answers from the latest snapshot while it is young enough", async () => {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(1) });
  const monitor = new GpuMonitor({ env: gpus.env });
  const first = await monitor.snapshot(60_000);
  assert.equal(await monitor.snapshot(60_000), first);
  assert.equal(monitor.queries, 1);
  await gpus.addForeign("job", { pid: 4242, gpu: "0", mib: 1234 });
  await sleep(60);
  // Older than 50 ms: asked again, and the new facts show.
  const second = await monitor.snapshot(50);
  assert.equal(monitor.queries, 2);
  assert.notEqual(second, first);
  assert.ok(second!.at > first!.at);
  assert.equal(second!.devices[0]!.usedMiB, 1234);
  assert.equal(first!.devices[0]!.usedMiB, 0);
  // A caller asking while a query is in flight gets that query's answer.
  const [third, fourth] = await Promise.all([
    monitor.snapshot(0),
    monitor.snapshot(60_000),
  ]);
  assert.equal(third, fourth);
  assert.equal(monitor.queries, 3);
  assert.equal((await gpus.calls()).length, 6);
});

Deno.test("a run of failures is one warning, and recovery one line; a new run warns again", async () => {
  await using gpus = await fakeGpuMachine({
    devices: fakeDevices(1),
    fail: true,
  });
  const monitor = new GpuMonitor({
    env: gpus.env,
    maxBackoffMs: 0,
    timeoutMs: 1000,
  });
  const { lines } = await captureLog(async () => {
    for (let i = 0; i < 3; i++) {
      assert.equal(await monitor.snapshot(0), undefined);
    }
    assert.equal(monitor.queries, 3);
    await gpus.setMachine({ devices: fakeDevices(1) });
    assert.ok(await monitor.snapshot(0));
    assert.ok(await monitor.snapshot(0));
    await gpus.setMachine({ devices: fakeDevices(1), hang: true });
    assert.equal(await monitor.snapshot(0), undefined);
    assert.equal(await monitor.snapshot(0), undefined);
  });
  assert.deepEqual(lines, [
    `warn: Cannot query GPUs: nvidia-smi --query-gpu: it exited with code 9 (Failed to initialize NVML: Driver/library version mismatch); ${SKIPPED} (retrying)`,
    "info: query GPUs: working again after 3 failure(s)",
    `warn: Cannot query GPUs: nvidia-smi --query-gpu: no answer within 1 s (killed); ${SKIPPED} (retrying)`,
  ]);
  assert.deepEqual(await gpus.processes(), []);
});

Deno.test("after failures the next query waits 1 s, 2 s, 4 s… up to maxBackoffMs, whatever maxAgeMs callers pass", async () => {
  let clock = 0;
  let fail = true;
  const snapshot: GpuSnapshot = { devices: [], processes: [], at: 1 };
  const monitor = new GpuMonitor({
    now: () => clock,
    maxBackoffMs: 3000,
    query(): Promise<GpuQuery> {
      return Promise.resolve(
        fail
          ? { ok: false, error: "nvidia-smi: broken" }
          : { ok: true, snapshot },
      );
    },
  });
  /** The number of queries made by a call at `at`, asking for maxAgeMs 0. */
  async function at(ms: number): Promise<number> {
    clock = ms;
    await monitor.snapshot(0);
    return monitor.queries;
  }
  const { lines } = await captureLog(async () => {
    assert.equal(await at(0), 1);
    assert.equal(await at(999), 1);
    assert.equal(await at(1000), 2); // waited 1 s
    assert.equal(await at(2999), 2);
    assert.equal(await at(3000), 3); // waited 2 s
    assert.equal(await at(5999), 3);
    assert.equal(await at(6000), 4); // 4 s capped at 3 s
    fail = false;
    assert.equal(await at(9000), 5);
    assert.equal(await monitor.snapshot(0), snapshot);
    assert.equal(monitor.queries, 6, "after a success maxAgeMs alone decides");
    // A caller's maxAgeMs longer than the backoff wins.
    fail = true;
    assert.equal(await at(10_000), 7);
    assert.equal(await monitor.snapshot(5000), undefined);
    clock = 14_999;
    assert.equal(await monitor.snapshot(5000), undefined);
    assert.equal(monitor.queries, 7);
  });
  assert.equal(lines.filter((line) => line.startsWith("warn:")).length, 2);
});

Deno.test("no nvidia-smi on PATH: one warning, no process, and re-checked only after maxBackoffMs", async () => {
  const empty = await Deno.makeTempDir({ prefix: "serve-nopath-" });
  try {
    const monitor = new GpuMonitor({
      env: { PATH: empty },
      maxBackoffMs: 300,
    });
    const { lines } = await captureLog(async () => {
      for (let i = 0; i < 20; i++) {
        assert.equal(await monitor.snapshot(0), undefined);
      }
      assert.equal(monitor.queries, 1);
      await sleep(350);
      assert.equal(await monitor.snapshot(0), undefined);
      assert.equal(monitor.queries, 2);
    });
    assert.deepEqual(lines, [
      `warn: Cannot query GPUs: nvidia-smi: not found on PATH; ${SKIPPED} (retrying)`,
    ]);
  } finally {
    await Deno.remove(empty, { recursive: true });
  }
});

Deno.test("a query that throws (a replaced one) counts as a failure, not a rejection", async () => {
  const snapshot: GpuSnapshot = { devices: [], processes: [], at: 1 };
  let fail = true;
  const monitor = new GpuMonitor({
    maxBackoffMs: 0,
    query(): Promise<GpuQuery> {
      if (fail) return Promise.reject(new Error("boom"));
      return Promise.resolve({ ok: true, snapshot });
    },
  });
  const { lines } = await captureLog(async () => {
    assert.equal(await monitor.snapshot(0), undefined);
    fail = false;
    assert.equal(await monitor.snapshot(0), snapshot);
  });
  assert.deepEqual(lines, [
    `warn: Cannot query GPUs: boom; ${SKIPPED} (retrying)`,
    "info: query GPUs: working again after 1 failure(s)",
  ]);
});

Deno.test("mark(): an answer asked before the mark is never given for it, however young; one in flight is awaited, then asked anew", async () => {
  const clock = 0;
  let queries = 0;
  let answer: () => void = () => {};
  const monitor = new GpuMonitor({
    now: () => clock,
    query(): Promise<GpuQuery> {
      const n = ++queries;
      return new Promise((resolve) => {
        answer = () =>
          resolve({
            ok: true,
            snapshot: { devices: [], processes: [], at: n },
          });
      });
    },
  });
  const first = monitor.snapshot(60_000);
  answer();
  assert.equal((await first)!.at, 1);
  assert.equal((await monitor.snapshot(60_000))!.at, 1, "young enough");
  const exited = monitor.mark();
  const second = monitor.snapshot(60_000, exited);
  assert.equal(queries, 2, "asked anew after the mark");
  // While it is in flight, callers after the same mark share it; a later mark waits for it.
  const shared = monitor.snapshot(60_000, exited);
  const later = monitor.mark();
  const third = monitor.snapshot(60_000, later);
  answer();
  assert.equal((await second)!.at, 2);
  assert.equal((await shared)!.at, 2);
  await sleep(0);
  assert.equal(
    queries,
    3,
    "the later mark's query is asked once the earlier one is in",
  );
  answer();
  assert.equal((await third)!.at, 3);
  assert.equal((await monitor.snapshot(60_000))!.at, 3);
  assert.equal((await monitor.snapshot(60_000, later))!.at, 3);
});

Deno.test("mark(): a failure keeps answering through its backoff, marks or not", async () => {
  let clock = 0;
  const monitor = new GpuMonitor({
    now: () => clock,
    maxBackoffMs: 4000,
    query: () => Promise.resolve({ ok: false, error: "nvidia-smi: broken" }),
  });
  await captureLog(async () => {
    assert.equal(await monitor.snapshot(0), undefined);
    assert.equal(await monitor.snapshot(0, monitor.mark()), undefined);
    assert.equal(monitor.queries, 1, "an event does not mend nvidia-smi");
    clock = 1000;
    assert.equal(await monitor.snapshot(0, monitor.mark()), undefined);
    assert.equal(monitor.queries, 2);
  });
});
