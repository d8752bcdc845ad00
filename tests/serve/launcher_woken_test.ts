/**
 * Issue 54: more models than memory, without a proxy. Three vLLM cards of
 * 10 GiB each on one 24 GiB GPU, through the real CLI, with the vLLM stand-in
 * built from vLLM's source (tests/fixtures/vllm_stand_in.ts: sleep pauses its
 * scheduler, a request that comes asleep parks and counts in `/load`, a wake
 * past the device's memory fails) in a stand-in `nvidia-smi`. The launcher
 * probes the build, starts the third card by putting an idle one to sleep,
 * wakes a sleeper for each parked request after making room, never puts the
 * pinned card to sleep, and holds a request while every other engine is busy
 * until one's work ends.
 */
import assert from "node:assert/strict";
import { models, readJournal, waitFor } from "../support/helpers.ts";
import { fakeDevices } from "../support/fake_gpus.ts";
import { catalogueText } from "../support/gpu_cards.ts";
import { gpuSite } from "../support/gpu_site.ts";
import { vllmStandIn } from "../support/vllm_stand_in.ts";

const MIB = 2 ** 20;
const card = (extra: Record<string, unknown> = {}) => ({
  engine: "vllm",
  gpu_memory: "10GiB",
  sleep_after: 600, // asleep only to make room here
  args: {
    "fake-awake-mib": 10240,
    "fake-residue-mib": 1024,
    "fake-load-ms": 300,
    "fake-wake-ms": 150,
    "fake-tokens": 4,
    "fake-token-ms": 20,
  },
  ...extra,
});
const CARDS = { a: card({ pin: true }), b: card(), c: card() };

interface Journaled {
  model: string | null;
  event: string;
  reason?: string;
  detail?: string;
}

async function site(cards: Record<string, Record<string, unknown>> = CARDS) {
  const s = await gpuSite({
    cards,
    bin: "vllm stand-in",
    devices: fakeDevices(1, 24576),
    gpus: "0",
  });
  const { root, port } = s;
  return {
    ...s,
    journal: () => readJournal<Journaled>(root),
    /** A chat request straight to the engine's own port, as a client sends it. */
    async chat(name: string, stream = false): Promise<string> {
      const engine = (await models(port, true)).active[name]!;
      const response = await fetch(
        `${engine.url}/chat/completions`,
        {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            model: name,
            messages: [{ role: "user", content: "hi" }],
            max_tokens: 4,
            stream,
          }),
          signal: AbortSignal.timeout(30_000),
        },
      );
      const text = await response.text();
      assert.equal(response.status, 200, `${name}: ${text}`);
      return text;
    },
    async state(name: string): Promise<string | undefined> {
      return (await models(port, true)).active[name]?.state;
    },
  };
}

/** The device's used MiB by the stand-in nvidia-smi's ledger, never past its total. */
function deviceUsed(ledger: string): number {
  let used = 0;
  for (const entry of Deno.readDirSync(`${ledger}/procs`)) {
    if (!entry.name.endsWith(".json")) continue;
    try {
      const proc = JSON.parse(
        Deno.readTextFileSync(`${ledger}/procs/${entry.name}`),
      );
      if (proc.goneAt === undefined) used += proc.mib;
    } catch { /* being rewritten */ }
  }
  return used;
}

Deno.test("three 10 GiB vLLM cards on one 24 GiB GPU: the third starts once an idle one sleeps, alternating requests each wake their engine after room is made, none fails or runs out of memory, and the pinned card never sleeps for room", async () => {
  await using s = await site();
  const launcher = s.start(["a", "b", "c"]);
  try {
    await launcher.ready();
    await waitFor(
      async () => {
        const active = (await models(s.port, true)).active;
        const states = ["a", "b", "c"].map((n) => active[n]?.state);
        return states.every((x) => x === "ready" || x === "sleeping") &&
          states.includes("sleeping");
      },
      "all three loaded, one asleep to make room",
      40_000,
    );
    const journal = await s.journal();
    const probe = journal.find((e) => e.reason === "probe");
    assert.ok(probe, "the build was probed: sleep, a parked request, a wake");
    const room = journal.filter((e) =>
      e.reason === "made-room" && /make room for c\b/.test(e.detail ?? "")
    );
    assert.equal(room.length, 1, "one engine made room for the third start");
    assert.notEqual(room[0]!.model, "a", "never the pinned card");

    // Alternate: each request to a sleeper parks in its /load until its wake.
    let peak = 0;
    const watch = setInterval(() => {
      peak = Math.max(peak, deviceUsed(s.machine.ledger));
    }, 20);
    try {
      const order = ["b", "c", "a", "b", "c", "b", "a", "c"];
      for (const [i, name] of order.entries()) {
        const text = await s.chat(name, i % 2 === 1);
        assert.ok(text.length > 0);
      }
    } finally {
      clearInterval(watch);
    }
    assert.ok(peak <= 24576, `the device held ${peak} MiB at its peak`);
    // The journal is written behind (it never waits): read it once the
    // launcher's count of switches is in it.
    const counted = async () => {
      const active = (await models(s.port, true)).active;
      return ["a", "b", "c"].reduce(
        (n, x) => n + active[x]!.sleep!.switches,
        0,
      );
    };
    let after = await s.journal();
    await waitFor(async () => {
      after = await s.journal();
      const journaled = after.filter((e) => e.reason === "switch").length;
      return journaled >= await counted();
    }, "every switch journaled");
    const switches = after.filter((e) => e.reason === "switch");
    assert.ok(switches.length >= 3, `switches: ${switches.length}`);
    assert.ok(
      !after.some((e) => e.model === "a" && e.reason === "made-room"),
      "the pinned card is never put to sleep for room",
    );
    assert.ok(!after.some((e) => e.reason === "wake-failed"), "no wake failed");
    const active = (await models(s.port, true)).active;
    const sleepOf = (n: string) => active[n]!.sleep!;
    assert.equal(sleepOf("b").woken_by, "launcher");
    const total = ["a", "b", "c"].reduce((n, x) => n + sleepOf(x).switches, 0);
    assert.equal(total, switches.length, "each switch counted once");
    const last = ["b", "c"].map((n) => sleepOf(n))
      .find((z) => z.last_switch_seconds !== null)!;
    assert.ok(last.last_switch_seconds! > 0);
    assert.ok(last.last_wake_seconds! >= 0.1, "the stand-in's 150 ms wake");
    const slept = ["b", "c"].map((n) => sleepOf(n))
      .find((z) => z.residue_bytes !== null);
    if (slept) assert.equal(slept.residue_bytes, 1024 * MIB);
    // vLLM's own "Sleep mode freed … still in use" line was read at a sleep.
    assert.ok(
      ["b", "c"].some((n) => sleepOf(n).engine_in_use_bytes !== null),
      "the engine's own figures from its sleep line",
    );
    const metrics = await Deno.readTextFile(
      `${s.root}/metrics/mymodel_serve_${s.port}.prom`,
    );
    assert.match(
      metrics,
      /^mymodel_engine_switch_duration_seconds_count\{[^}]*model="[bc]"[^}]*\} [1-9]/m,
    );
    assert.match(metrics, /^mymodel_engine_made_room_total\{[^}]*\} [1-9]/m);
  } finally {
    await launcher.stop();
  }
});

Deno.test("a request that finds no room waits parked while the others are busy or pinned, says why once, and is served when a stream ends", async () => {
  await using s = await site({
    a: card({ pin: true }),
    b: card({
      args: { ...card().args, "fake-tokens": 60, "fake-token-ms": 50 },
    }),
    c: card(),
  });
  const launcher = s.start(["a", "b", "c"]);
  try {
    await launcher.ready();
    await waitFor(
      async () =>
        (await s.state("c")) === "ready" &&
        ["ready", "sleeping"].includes(await s.state("b") ?? ""),
      "all three loaded",
      40_000,
    );
    // b streams for 3 s; c is then put to sleep for b's wake if b slept.
    const long = s.chat("b", true);
    await waitFor(async () => (await s.state("b")) === "ready", "b awake");
    const sleeper = (await s.state("c")) === "sleeping" ? "c" : undefined;
    assert.equal(sleeper, "c", "c slept to make room for b");
    const began = Date.now();
    const parked = s.chat("c");
    await waitFor(
      async () =>
        (await s.journal()).some((e) =>
          e.model === "c" && e.reason === "wake-waits" &&
          /busy/.test(e.detail ?? "")
        ),
      "the wait's reason journaled",
    );
    assert.equal(await s.state("c"), "waking");
    const view = (await models(s.port, true)).active.c!.sleep!;
    assert.match(
      view.waits_for ?? "",
      /room on GPU 0: .*b busy.*a pinned|a pinned.*b busy/,
    );
    await long;
    await parked;
    const waited = (Date.now() - began) / 1000;
    assert.ok(waited > 1, `served only after b's stream ended (${waited} s)`);
    const said = (await s.journal()).filter((e) =>
      e.model === "c" && e.reason === "wake-waits"
    );
    // A reason is said once (b just woken, then b busy), not at each 250 ms poll.
    assert.ok(said.length <= 2, JSON.stringify(said));
  } finally {
    await launcher.stop();
  }
});

Deno.test("--dry-run starts three 10 GiB launcher-woken cards on one 24 GiB GPU: per device who starts awake, who asleep (never the pinned one), their residues (estimated until measured) and what is left; a card that could never fit alone is refused in one line", async () => {
  await using s = await site({
    ...CARDS,
    huge: card({ gpu_memory: "30GiB" }),
  });
  const plan = JSON.parse(await s.dryRun(["a", "b", "c"]));
  const gpu = plan.gpus[0];
  const starts = Object.fromEntries(
    gpu.engines.map((
      e: { name: string; sleep: { starts: string } },
    ) => [e.name, e.sleep.starts]),
  );
  assert.deepEqual(starts, { a: "awake", b: "asleep", c: "awake" });
  const b = gpu.engines.find((e: { name: string }) => e.name === "b").sleep;
  assert.equal(b.woken_by, "launcher");
  assert.equal(b.asleep_mib, 1434);
  assert.match(b.asleep_from, /^estimated: vLLM's level-1 sleep/);
  // Two awake, one residue: 24576 - 2 × 10240 - 1434.
  assert.equal(gpu.left_mib, 24576 - 2 * 10240 - 1434);
  // The ledger: three residues and room for one to wake.
  assert.equal(gpu.need_mib, 3 * 1434 + 10240 - 1434);
  // Beside the stand-in's flags and --shutdown-timeout's absence: no device short.
  assert.deepEqual(
    plan.warnings.filter((w: string) => /GPU|fit/.test(w)),
    [],
  );
  const text = await s.dryRun(["a", "b", "c"], false);
  assert.match(text, /b 0\.4167 \(10240 MiB .*launcher-woken, starts asleep\)/);
  assert.match(text, /\bLEFT\b/);
  const refused = await s.dryRun(["a", "huge"], true, 1);
  assert.match(
    refused.trim(),
    /^\[serve\] error: .*huge.*30720 MiB.*fits on no GPU[^\n]*$/,
  );
});

Deno.test("the probe leaves a build without launcher-driven sleep, in one line, when its development routes answer without the engine key or it parks nothing asleep (before 0.17); a build that passes sleeps when idle", async () => {
  await using s = await site();
  const [open, old, good] = [
    await vllmStandIn(),
    await vllmStandIn(),
    await vllmStandIn(),
  ];
  try {
    const cards = {
      // Released vLLM's --api-key guards /v1 only: its dev routes answer anyone.
      open: {
        ...card({ gpu_memory: "6GiB" }),
        executable: open.executable,
        sleep_after: 1,
        args: { ...card().args, "fake-awake-mib": 6144 },
      },
      old: {
        ...card({ gpu_memory: "6GiB" }),
        executable: old.executable,
        sleep_after: 1,
        args: {
          ...card().args,
          "fake-no-mode": true,
          "fake-auth": "route-table",
        },
      },
      good: {
        ...card({ gpu_memory: "6GiB" }),
        executable: good.executable,
        sleep_after: 1,
        args: {
          ...card().args,
          "fake-awake-mib": 6144,
          "fake-auth": "route-table",
        },
      },
    };
    await Deno.writeTextFile(`${s.root}/cards.yaml`, catalogueText(cards));
    const launcher = s.start(["open", "old", "good"], {
      LOCAL_ENGINE_API_KEY: "engine-key-0123456789",
    });
    try {
      await launcher.ready();
      await waitFor(
        async () => (await s.state("good")) === "sleeping",
        "the build that passed asleep after 1 s idle",
        30_000,
      ).catch((e) => {
        throw new Error(`${e.message}\n${launcher.stderr}`);
      });
      await launcher.waitForLine(
        /engine open: runs without launcher-driven sleep: its \/is_sleeping answers without the engine key/,
      );
      await launcher.waitForLine(
        /engine old: runs without launcher-driven sleep: vLLM 0\.16\.0 does not park requests while asleep/,
      );
      await new Promise((resolve) => setTimeout(resolve, 1500));
      const active = (await models(s.port, true)).active;
      for (const name of ["open", "old"]) {
        assert.equal(active[name]!.state, "ready", `${name} never slept`);
        assert.match(active[name]!.sleep!.launcher_sleep_off ?? "", /./);
      }
      assert.equal(active.good!.sleep!.launcher_sleep_off, null);
      const said = launcher.lines.filter((l) =>
        /runs without launcher-driven sleep/.test(l)
      );
      assert.equal(said.length, 2, "one line each");
    } finally {
      await launcher.stop();
    }
  } finally {
    for (const v of [open, old, good]) await v[Symbol.asyncDispose]();
  }
});
