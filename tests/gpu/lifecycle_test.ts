/**
 * The GPU-aware engine lifecycle through the real CLI: stand-in engines that
 * enter their GPU memory in a ledger, and a stand-in `nvidia-smi` answering
 * from it (tests/fixtures/nvidia_smi.ts). Rules: one load at a time per device,
 * the dead run's memory back before a restart, free memory before a start,
 * silent loads stopped.
 */
import assert from "node:assert/strict";
import {
  launch,
  models,
  nth,
  pidAlive,
  readRecord,
  type Setup,
  waitFor,
  waitForTransitions,
  withinGuard,
} from "../support/helpers.ts";
import {
  fakeDevices,
  type FakeGpuMachine,
  fakeGpuMachine,
  nvidiaSmiScript,
} from "../support/fake_gpus.ts";

const CATALOGUE = new URL("../fixtures/gpu_lifecycle.yaml", import.meta.url)
  .pathname;

/**
 * The launcher on a fake GPU machine (or none), polling fast
 * (`--health-interval 0.3`) unless `fastHealth` is false: then at the
 * launcher's default interval.
 */
function launchOn(
  gpus: FakeGpuMachine | undefined,
  names: string[],
  args: string[] = [],
  fastHealth = true,
): Promise<Setup> {
  return launch(names, {
    catalogue: CATALOGUE,
    args: [...(fastHealth ? ["--health-interval", "0.3"] : []), ...args],
    ...(gpus
      ? {
        bin: { "nvidia-smi": nvidiaSmiScript() },
        env: { FAKE_GPU_LEDGER: gpus.ledger },
      }
      : {}),
  });
}

/**
 * Asserts, from the journal's order, that each of `names` was admitted
 * (waiting → starting) only once the one before it had answered its first 200.
 */
async function loadedInTurn(s: Setup, names: string[]): Promise<void> {
  const list = await waitForTransitions(s.root, names.map((n) => `${n}:ready`));
  for (let i = 1; i < names.length; i++) {
    const [before, after] = [names[i - 1]!, names[i]!];
    const waited = nth(list, `${after}:waiting`);
    assert.ok(waited >= 0, `${after} waited: ${list.join(", ")}`);
    assert.ok(
      admitted(list, after, waited) > nth(list, `${before}:ready`),
      `${after} admitted after ${before} was ready: ${list.join(", ")}`,
    );
  }
}

/** Where `name` went from waiting to starting (-1 if it has not), its wait at `waited`. */
function admitted(list: string[], name: string, waited: number): number {
  const at = list.indexOf(`${name}:starting`, waited);
  return waited >= 0 ? at : -1;
}

/**
 * Asserts, from the journal, that none of `names` was held at the gate
 * (a held start is journaled `waiting`): each spawned at once.
 */
async function startedTogether(s: Setup, names: string[]): Promise<void> {
  const list = await waitForTransitions(s.root, names.map((n) => `${n}:ready`));
  for (const name of names) {
    assert.equal(nth(list, `${name}:waiting`), -1, list.join(", "));
  }
}

Deno.test("three shares on one device load one after another, in request order", async () => {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(1) });
  await using s = await launchOn(gpus, ["share1", "share2", "share3"], [
    "--gpus",
    "0",
  ]);
  await s.launcher.ready();
  const early = await models(s.port, true);
  assert.equal(early.active.share1?.state, "starting");
  assert.equal(early.active.share3?.state, "waiting");
  assert.equal(early.active.share3?.pid, null);
  assert.equal(early.active.share3?.healthy, false);
  assert.equal(early.active.share3?.waiting_for?.reason, "gpu-busy-loading");
  assert.deepEqual(early.active.share3?.waiting_for?.devices, ["0"]);
  // Each spawns only once the previous one answered its first 200.
  await loadedInTurn(s, ["share1", "share2", "share3"]);
  await s.launcher.waitForLine(
    /engine share2 waits for GPU 0: engine share1 (is loading there|asked first)/,
  );
  await s.launcher.waitForLine(
    /engine share3 starts on GPU 0 \(waited for gpu-busy-loading\)/,
  );
});

Deno.test("engines on different devices start together; without a pool nothing is gated", async () => {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(2) });
  await using s = await launchOn(gpus, ["whole1", "whole2"], ["--gpus", "0-1"]);
  await s.launcher.ready();
  await startedTogether(s, ["whole1", "whole2"]);

  await using plain = await launchOn(
    undefined,
    ["share1", "share2", "share3"],
    [
      "--gpus",
      "none",
    ],
  );
  await plain.launcher.ready();
  await startedTogether(plain, ["share1", "share2", "share3"]);
  assert.doesNotMatch(plain.launcher.stderr, /waits for GPU/);
});

Deno.test("a restart waits while a neighbour on its device is loading", async () => {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(1) });
  await using s = await launchOn(gpus, ["quickcrash", "slowshare"], [
    "--gpus",
    "0",
  ]);
  await s.launcher.ready();
  const first = await waitForRecord(s, 1);
  // quickcrash crashes after 1.5 s and its restart (1 s later) meets slowshare's 5 s load.
  await waitFor(async () => {
    const q = (await models(s.port, true)).active.quickcrash;
    return q?.state === "waiting" &&
      q.waiting_for?.reason === "gpu-busy-loading";
  }, "quickcrash waiting for slowshare's load");
  await waitForRecord(s, 1, first.pid);
  const list = await waitForTransitions(s.root, [
    "slowshare:ready",
    "quickcrash:waiting",
    "quickcrash:starting",
  ]);
  const waited = nth(list, "quickcrash:waiting");
  assert.ok(
    admitted(list, "quickcrash", waited) > nth(list, "slowshare:ready"),
    `the restart spawned only after slowshare's load was over: ${
      list.join(", ")
    }`,
  );
  assert.equal((await models(s.port, true)).active.slowshare?.state, "ready");
});

Deno.test("a restart waits until the dead run's pid leaves nvidia-smi's list", async () => {
  await using gpus = await fakeGpuMachine({
    devices: fakeDevices(1),
    releaseMs: 2500,
  });
  await using s = await launchOn(gpus, ["crashgpu"], ["--gpus", "0"]);
  await s.launcher.ready();
  const first = await waitForRecord(s, 1);
  await waitFor(async () => {
    const d = (await models(s.port, true)).active.crashgpu;
    return d?.waiting_for?.reason === "gpu-memory-release";
  }, "waiting for the dead run's memory");
  const detail = (await models(s.port, true)).active.crashgpu!;
  assert.match(
    detail.waiting_for!.detail,
    new RegExp(`pid ${first.pid} \\(3000 MiB\\)`),
  );
  await waitForRecord(s, 1, first.pid);
  assert.ok(
    !(await gpus.procs()).has(first.pid),
    "the new run spawned only once the dead pid had left the ledger",
  );
});

Deno.test("with the default --health-interval, a restart after a crash during load or after a long run waits for the dead pid to leave nvidia-smi's list, and starts on seeing it gone, not at --gpu-release-timeout", async () => {
  // Issue 24: the restart of a run that failed during its load used facts
  // from before the run had allocated anything, and spawned into its memory.
  const RELEASE_MS = 4000;
  await using gpus = await fakeGpuMachine({
    devices: fakeDevices(2),
    releaseMs: RELEASE_MS,
  });
  await using s = await launchOn(
    gpus,
    ["loadcrash", "longcrash"],
    ["--gpus", "0,1"],
    false,
  );
  await s.launcher.ready();
  const waits = watchReleaseWaits(s, ["loadcrash", "longcrash"]);
  try {
    const load1 = await waitForRecord(s, 1);
    const long1 = await waitForRecord(s, 2);
    const load2 = await waitForRecord(s, 1, load1.pid);
    const long2 = await waitForRecord(s, 2, long1.pid, 40_000);
    for (
      const [name, first, next, crashMs] of [
        ["loadcrash", load1, load2, 1700],
        ["longcrash", long1, long2, 12_000],
      ] as const
    ) {
      // The stand-in lists the dead pid RELEASE_MS after its exit, which came
      // crashMs after its start (a little later on a busy machine).
      const released = first.startedAt + crashMs + RELEASE_MS;
      assert.ok(
        next.startedAt >= released,
        `${name}: restarted ${
          next.startedAt - first.startedAt - crashMs
        } ms after its exit, into memory listed for ${RELEASE_MS} ms after it`,
      );
      // Released by a round that saw the pid gone (the gate's own line), not
      // by the release timeout running out ("starting anyway").
      await s.launcher.waitForLine(
        new RegExp(
          `engine ${name} starts on GPU .*waited for gpu-memory-release`,
        ),
      );
      assert.doesNotMatch(
        s.launcher.stderr,
        new RegExp(`engine ${name}: GPU .* starting anyway`),
      );
      assert.match(
        waits.get(name) ?? "(never held for gpu-memory-release)",
        new RegExp(`pid ${first.pid} \\(30000 MiB\\) still listed`),
        name,
      );
    }
  } finally {
    await waits.stop();
  }
});

/** The detail of each engine's first gpu-memory-release wait, polled from `/models?detail=1`. */
function watchReleaseWaits(s: Setup, names: string[]) {
  const seen = new Map<string, string>();
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      try {
        const active = (await models(s.port, true)).active;
        for (const name of names) {
          const held = active[name]?.waiting_for;
          if (!seen.has(name) && held?.reason === "gpu-memory-release") {
            seen.set(name, held.detail);
          }
        }
      } catch {
        // The launcher is starting or stopping.
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  })();
  return Object.assign(seen, {
    stop: async () => {
      stopped = true;
      await loop;
    },
  });
}

Deno.test("in a container (nvidia-smi lists host pids that match nothing), restarts of two neighbours on one device wait for the memory to come back, not for --gpu-release-timeout", async () => {
  await using gpus = await fakeGpuMachine({
    devices: fakeDevices(1),
    releaseMs: 300,
    hostPids: true,
  });
  await using s = await launchOn(gpus, ["quickcrash", "crashshare"], [
    "--gpus",
    "0",
  ]);
  await s.launcher.ready();
  const quick = await waitForRecord(s, 1);
  const share = await waitForRecord(s, 2);
  // Restarted both, and neither at --gpu-release-timeout (30 s): that one
  // says "starting anyway".
  await waitForRecord(s, 1, quick.pid);
  await waitForRecord(s, 2, share.pid);
  assert.ok(
    !s.launcher.lines.some((l) => /starting anyway/.test(l)),
    s.launcher.lines.join("\n"),
  );
});

Deno.test("a GPU whose memory reads as an error holds its engine (waiting, gpu-error, nvidia-smi's words) until it reports memory again", async () => {
  await using gpus = await fakeGpuMachine({
    devices: fakeDevices(1).map((d) => ({
      ...d,
      error: "[GPU requires reset]",
    })),
  });
  await using s = await launchOn(gpus, ["share1"], [
    "--gpus",
    "0",
  ]);
  await s.launcher.ready();
  await waitFor(async () => {
    const d = (await models(s.port, true)).active.share1;
    return d?.state === "waiting" && d.waiting_for?.reason === "gpu-error";
  }, "share1 held for the GPU error");
  const held = (await models(s.port, true)).active.share1!.waiting_for!;
  assert.deepEqual(held, {
    reason: "gpu-error",
    devices: ["0"],
    detail: "GPU 0: [GPU requires reset]",
  });
  assert.equal(
    await readRecord(s.records, s.port + 1),
    undefined,
    "not spawned",
  );
  await gpus.setMachine({ devices: fakeDevices(1) });
  await waitForRecord(s, 1);
});

Deno.test("past --gpu-release-timeout a restart proceeds with one warning", async () => {
  await using gpus = await fakeGpuMachine({
    devices: fakeDevices(1),
    releaseMs: 60_000,
  });
  await using s = await launchOn(gpus, ["crashgpu"], [
    "--gpus",
    "0",
    "--gpu-release-timeout",
    "1",
  ]);
  await s.launcher.ready();
  const first = await waitForRecord(s, 1);
  await waitForRecord(s, 1, first.pid);
  const line = await s.launcher.waitForLine(/starting anyway/);
  assert.match(
    line,
    new RegExp(
      `engine crashgpu: GPU 0: pid ${first.pid} \\(3000 MiB\\) still listed`,
    ),
  );
  assert.ok(
    (await gpus.procs()).has(first.pid),
    "the dead pid is still listed",
  );
});

Deno.test("a start waits while a foreign process holds the memory, and starts once it is freed, on one query round per interval", async () => {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(1) });
  const sleeper = new Deno.Command("sleep", { args: ["60"] }).spawn();
  try {
    await gpus.addForeign("job", { pid: sleeper.pid, gpu: "0", mib: 60000 });
    const launchedAt = Date.now();
    await using s = await launchOn(gpus, ["whole1"], ["--gpus", "0"]);
    await s.launcher.ready();
    const line = await s.launcher.waitForLine(/engine whole1 waits for GPU 0/);
    assert.match(
      line,
      new RegExp(
        `21920 MiB free, needs 73728 MiB \\(gpu-memory-utilization 0.9 \\(vLLM's default\\)\\); held by pid ${sleeper.pid} \\(sleep, 60000 MiB\\), not an engine of this launcher`,
      ),
    );
    const held = (await models(s.port, true)).active.whole1!;
    assert.equal(held.state, "waiting");
    assert.equal(held.pid, null);
    assert.equal(held.waiting_for?.reason, "gpu-memory-free");
    const freedAt = Date.now();
    await gpus.removeForeign("job");
    const started = await waitForRecord(s, 1);
    // Order, not time: spawned only once the memory was freed.
    assert.ok(started.startedAt >= freedAt, "not spawned while held");
    await s.launcher.waitForLine(
      /engine whole1 starts on GPU 0 \(waited for gpu-memory-free\)/,
    );
    // One nvidia-smi query round per interval at most, whatever the number of waits.
    const rounds = (await gpus.calls()).filter((c) =>
      c.args.some((a) =>
        a.startsWith("--query-compute-apps")
      )
    ).length;
    // A guard against a query storm (a wait that polls without its interval
    // asks hundreds of times a second), not a timing: three times one round
    // per 0.3 s interval since the launcher started.
    const seconds = (Date.now() - launchedAt) / 1000;
    assert.ok(rounds <= 3 * (seconds / 0.3 + 3), `${rounds} query rounds`);
  } finally {
    sleeper.kill();
    await sleeper.status;
  }
});

Deno.test("SIGTERM during a wait at the gate exits at once", async () => {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(1) });
  await gpus.addForeign("job", { pid: 999_999_99, gpu: "0", mib: 80000 });
  await using s = await launchOn(gpus, ["whole1"], ["--gpus", "0"]);
  await s.launcher.ready();
  await s.launcher.waitForLine(/engine whole1 waits for GPU 0/);
  // The foreign job never frees the memory: a stop that waited for the gate
  // would never end, and the hang guard fails it.
  const status = await withinGuard(s.launcher.stop("SIGTERM"), "the stop");
  assert.equal(status.code, 0);
  assert.equal(await readRecord(s.records, s.port + 1), undefined);
});

Deno.test("without nvidia-smi, or with a failing one, rule 1 still holds and nothing crashes", async () => {
  // No nvidia-smi at all: the pool comes from --gpus.
  await using blind = await launchOn(undefined, ["share1", "share2"], [
    "--gpus",
    "0",
  ]);
  await blind.launcher.ready();
  await loadedInTurn(blind, ["share1", "share2"]);

  await using gpus = await fakeGpuMachine({
    devices: fakeDevices(1),
    fail: true,
  });
  await using failing = await launchOn(gpus, ["share1", "share2"], [
    "--gpus",
    "0",
  ]);
  await failing.launcher.ready();
  await loadedInTurn(failing, ["share1", "share2"]);
  const warnings = failing.launcher.lines.filter((l) =>
    /Cannot query GPUs/.test(l)
  );
  assert.equal(warnings.length, 1, failing.launcher.stderr);
  assert.equal(failing.launcher.status, undefined, "the launcher runs on");
});

Deno.test("an nvidia-smi that answers garbage or lists a device twice: one warning, GPU facts unknown, rule 1 still holds, nothing crashes or sticks", async () => {
  for (const bad of [{ garbage: true }, { duplicate: true }]) {
    await using gpus = await fakeGpuMachine({
      devices: fakeDevices(1),
      ...bad,
    });
    await using s = await launchOn(gpus, ["share1", "share2"], ["--gpus", "0"]);
    await s.launcher.ready();
    await loadedInTurn(s, ["share1", "share2"]);
    const warnings = s.launcher.lines.filter((l) =>
      /Cannot query GPUs/.test(l)
    );
    assert.equal(warnings.length, 1, s.launcher.lines.join("\n"));
    assert.match(warnings[0]!, bad.garbage ? /502 Bad Gateway/ : /twice/);
  }
});

Deno.test("a silent load is stopped after --start-timeout and restarted; a load that prints progress is left alone", async () => {
  await using s = await launchOn(undefined, ["silent", "chatty"], [
    "--start-timeout",
    "1",
    "--health-interval",
    "0.2",
  ]);
  await s.launcher.ready();
  const silent = await waitForRecord(s, 1);
  const chatty = await waitForRecord(s, 2);
  await waitFor(async () => {
    const d = (await models(s.port, true)).active.silent;
    return d?.last_exit?.reason === "start-timeout";
  }, "the silent load stopped for start-timeout");
  await s.launcher.waitForLine(
    /engine silent .* wrote nothing for \d+ s \(--start-timeout\): stopping it/,
  );
  await waitForRecord(s, 1, silent.pid);
  const after = await models(s.port, true);
  assert.ok((after.active.silent?.restarts ?? 0) >= 1);
  assert.equal(after.active.chatty?.pid, chatty.pid, "the chatty load runs on");
  assert.equal(after.active.chatty?.restarts, 0);
  assert.ok(pidAlive(chatty.pid));
});

/** The stand-in record of engine `i`, once one exists (and, with `not`, is of another pid). */
async function waitForRecord(
  s: Setup,
  i: number,
  not?: number,
  ms = 20_000,
) {
  let found: Awaited<ReturnType<typeof readRecord>>;
  await waitFor(
    async () => {
      found = await readRecord(s.records, s.port + i);
      return found !== undefined && found.pid !== not;
    },
    `engine ${i}'s ${not ? "next " : ""}run`,
    ms,
  );
  return found!;
}

Deno.test("in a container, a run is charged its load only: a neighbour that loaded after it is never its, and its restart waits only for its own memory", async () => {
  await using gpus = await fakeGpuMachine({
    devices: fakeDevices(1),
    releaseMs: 2000,
    hostPids: true,
  });
  await using s = await launchOn(gpus, ["charged", "neighbour"], [
    "--gpus",
    "0",
  ]);
  await s.launcher.ready();
  const first = await waitForRecord(s, 1);
  const neighbour = await waitForRecord(s, 2);
  assert.ok(neighbour.startedAt > first.startedAt, "the neighbour loads after");
  // Both serving: the figure is the run's load, not the device's change since.
  let figure: number | null = null;
  await waitFor(
    async () => {
      const body = await models(s.port, true);
      const charged = body.active.charged!;
      const other = body.active.neighbour!;
      figure = charged.gpu_memory_mib?.["0"] ?? null;
      return charged.state === "ready" && other.state === "ready" &&
        other.gpu_memory_mib?.["0"] === 30_000 && figure !== null;
    },
    "both ready, both measured",
    20_000,
  );
  await waitForRecord(s, 1, first.pid, 40_000);
  assert.equal(figure, 10_000);
  // Waiting for the neighbour's memory too would last until
  // --gpu-release-timeout, and say "starting anyway".
  assert.ok(
    !s.launcher.lines.some((l) => /starting anyway/.test(l)),
    s.launcher.lines.join("\n"),
  );
  assert.equal((await readRecord(s.records, s.port + 2))?.pid, neighbour.pid);
  assert.ok(pidAlive(neighbour.pid), "the neighbour keeps its pid");
});
