/**
 * Load phases and exit causes over stand-in engines that print the real engines' lines
 * (tests/fixtures/engine_lines.ts): load phases in `?detail=1`, the exit
 * causes and their messages, recovery by cause, a download that prints
 * nothing surviving a short `--start-timeout`, and the journal under a
 * restart storm.
 */
import assert from "node:assert/strict";
import { getJson, launch, type Setup, waitFor } from "../support/helpers.ts";

const CARDS =
  new URL("../fixtures/phases_and_causes.yaml", import.meta.url).pathname;

interface Entry {
  state: string;
  pid: number | null;
  restarts: number;
  next_restart: string | null;
  phase: string | null;
  phase_since: string | null;
  progress: { done: number; total: number | null; unit: string } | null;
  last_exit: { cause: string; message: string | null } | null;
}

async function detail(s: Setup): Promise<Record<string, Entry>> {
  const { body } = await getJson(
    `http://127.0.0.1:${s.port}/models?detail=1`,
  );
  return (body as { active: Record<string, Entry> }).active;
}

/** Every distinct phase (with its progress) each engine showed until all were ready. */
async function phasesUntilReady(
  s: Setup,
  names: string[],
): Promise<Record<string, string[]>> {
  const seen: Record<string, string[]> = Object.fromEntries(
    names.map((n) => [n, []]),
  );
  await waitFor(
    async () => {
      const active = await detail(s);
      for (const name of names) {
        const e = active[name]!;
        const text = e.phase === null
          ? e.state
          : `${e.phase}${
            e.progress ? ` ${e.progress.done}/${e.progress.total}` : ""
          }`;
        if (seen[name]!.at(-1) !== text) seen[name]!.push(text);
        if (e.state !== "starting") {
          assert.equal(e.phase, null, "no phase outside starting");
          assert.equal(e.progress, null);
        }
      }
      return names.every((n) => active[n]!.state === "ready");
    },
    "ready",
    30_000,
  );
  return seen;
}

Deno.test("vLLM's and SGLang's own start-up lines give loading (with shards) then preparing, then ready", async () => {
  await using s = await launch(["vllm-phases", "sglang-phases"], {
    catalogue: CARDS,
  });
  await s.launcher.ready();
  const seen = await phasesUntilReady(s, ["vllm-phases", "sglang-phases"]);
  for (const name of ["vllm-phases", "sglang-phases"]) {
    const phases = seen[name]!.filter((p) => p !== "starting");
    assert.ok(phases[0]!.startsWith("loading"), `${name}: ${phases}`);
    assert.ok(phases.includes("preparing"), `${name}: ${phases}`);
    assert.equal(phases.at(-1), "ready", `${name}: ${phases}`);
    assert.ok(
      phases.indexOf("preparing") >
        phases.findLastIndex((p) => p.startsWith("loading")),
      `${name}: ${phases}`,
    );
  }
  // The shards' bar ends at 4/4 (vLLM) and 2/2 (SGLang) while loading.
  assert.ok(seen["vllm-phases"]!.some((p) => /^loading \d\/4$/.test(p)));
});

Deno.test("each cause and its line: out of memory, memory profiling, port in use, bad arguments, model not found, exit", async () => {
  const names = [
    "vllm-oom",
    "vllm-kv",
    "vllm-profiling",
    "vllm-port",
    "vllm-args",
    "vllm-hub",
    "sglang-oom",
    "sglang-args",
    "plain-crash",
  ];
  // No retry of failed (issue 35's --failed-retry): failed has no next restart.
  await using s = await launch(names, {
    catalogue: CARDS,
    args: ["--failed-retry", "0"],
  });
  await s.launcher.ready();
  let active: Record<string, Entry> = {};
  await waitFor(
    async () => {
      active = await detail(s);
      return names.every((n) => active[n]!.last_exit !== null) &&
        ["vllm-args", "vllm-hub", "sglang-args"].every((n) =>
          active[n]!.state === "failed"
        );
    },
    "every engine ended once, the hopeless ones failed",
    30_000,
  );
  const expect: Record<string, [string, RegExp | null]> = {
    "vllm-oom": ["gpu-out-of-memory", /CUDA out of memory/],
    "vllm-kv": ["gpu-out-of-memory", /No available memory for the cache/],
    "vllm-profiling": [
      "gpu-memory-profiling",
      /^AssertionError: Error in memory profiling/,
    ],
    "vllm-port": ["port-in-use", /Address already in use/],
    "vllm-args": ["bad-arguments", /unrecognized arguments: --bogus-flag/],
    "vllm-hub": ["model-not-found", /RepositoryNotFoundError: 401/],
    "sglang-oom": ["gpu-out-of-memory", /Not enough memory/],
    "sglang-args": ["bad-arguments", /unrecognized arguments: --bogus-flag/],
    "plain-crash": ["exit", null],
  };
  for (const [name, [cause, message]] of Object.entries(expect)) {
    const exit = active[name]!.last_exit!;
    assert.equal(exit.cause, cause, name);
    if (message === null) assert.equal(exit.message, null, name);
    else assert.match(exit.message ?? "", message, name);
    assert.ok((exit.message ?? "").length <= 200, name);
  }
  for (const name of ["vllm-args", "vllm-hub", "sglang-args"]) {
    const e = active[name]!;
    assert.equal(e.restarts, 1, `${name}: two starts, no third`);
    assert.equal(e.pid, null);
    assert.equal(e.next_restart, null);
  }
  assert.notEqual(
    active["vllm-oom"]!.state,
    "failed",
    "out of memory follows the policy",
  );
  // The exit line in the engine's log names the cause and the line.
  const log = await Deno.readTextFile(`${s.root}/logs/vllm-oom.log`);
  assert.match(
    log,
    /exit: code 1 after \d+\.\d s \(gpu-out-of-memory: torch\.OutOfMemoryError/,
  );
});

Deno.test("gpu-memory-profiling is retried at the same delay a few times, then the delay grows", async () => {
  await using s = await launch(["vllm-profiling"], { catalogue: CARDS });
  await s.launcher.ready();
  const log = `${s.root}/logs/vllm-profiling.log`;
  let delays: string[] = [];
  await waitFor(
    async () => {
      const text = await Deno.readTextFile(log).catch(() => "");
      delays = [...text.matchAll(/restart \d+ in (\d+) s/g)].map((m) => m[1]!);
      return delays.length >= 4;
    },
    "four restarts",
    30_000,
  );
  assert.deepEqual(delays.slice(0, 4), ["1", "1", "1", "2"]);
});

Deno.test("a download that prints nothing but grows survives a 2 s --start-timeout, seen as downloading in bytes", async () => {
  const hf = await Deno.makeTempDir({ prefix: "serve-hf-" });
  try {
    await using s = await launch(["downloader"], {
      catalogue: CARDS,
      args: ["--start-timeout", "2"],
      env: { HF_HOME: hf },
    });
    await s.launcher.ready();
    const seen: Entry[] = [];
    await waitFor(
      async () => {
        const e = (await detail(s)).downloader!;
        seen.push(e);
        return e.state === "ready";
      },
      "downloader ready",
      30_000,
    );
    const downloading = seen.filter((e) => e.phase === "downloading");
    assert.ok(downloading.length > 0, "downloading seen");
    const last = downloading.at(-1)!;
    assert.equal(last.progress!.unit, "bytes");
    assert.ok(last.progress!.done >= 2_000_000, `${last.progress!.done} bytes`);
    assert.equal(seen.at(-1)!.restarts, 0, "not stopped by --start-timeout");
  } finally {
    await Deno.remove(hf, { recursive: true });
  }
});

Deno.test("the journal under a restart storm: every transition in order, nothing lost, rotated", async () => {
  await using s = await launch(["storm"], {
    catalogue: CARDS,
    args: [
      "--restart-max-delay",
      "1",
      "--log-max-bytes",
      "2000",
      "--log-keep",
      "50",
    ],
  });
  await s.launcher.ready();
  await waitFor(
    async () => {
      return (await detail(s)).storm!.restarts >= 6;
    },
    "six restarts",
    40_000,
  );
  await s.launcher.stop();
  const dir = `${s.root}/logs`;
  const files = [...Deno.readDirSync(dir)].map((e) => e.name)
    .filter((n) => n.startsWith("events.jsonl"));
  assert.ok(files.length > 1, `rotated: ${files}`);
  // Oldest first: events.jsonl.N … events.jsonl.1, events.jsonl.
  const order = files.sort((a, b) => rank(b) - rank(a));
  const events = order.flatMap((name) =>
    Deno.readTextFileSync(`${dir}/${name}`).trim().split("\n").map((line) =>
      JSON.parse(line)
    )
  );
  assert.equal(events[0].event, "started");
  assert.equal(events.at(-1).event, "stopped");
  // State changes chain; a stop that finds the engine ready also journals its drain, which is
  // an event of its own, not a transition.
  const storm = events.filter((e) =>
    e.model === "storm" && e.event === "state"
  );
  assert.ok(storm.length > 0, "state changes journaled");
  for (let i = 1; i < storm.length; i++) {
    assert.equal(storm[i].from, storm[i - 1].to, `event ${i} follows ${i - 1}`);
    assert.ok(storm[i].at >= storm[i - 1].at);
  }
  const starts = storm.filter((e) => e.to === "starting").length;
  // The first start is the supervisor's initial state (no transition); each restart is one.
  assert.ok(starts >= 6, `${starts} starts journaled`);
  assert.ok(storm.some((e) => e.to === "backoff" && e.reason === "exit"));
});

function rank(name: string): number {
  const n = /\.(\d+)$/.exec(name);
  return n ? Number(n[1]) : 0;
}
