/**
 * `--dry-run`: every start-up check, then the plan; nothing started, nothing
 * listening, nothing written. Stand-in engines (`vllm` on PATH) and the
 * stand-in `nvidia-smi` on 8 fake GPUs of 80 GiB.
 */
import assert from "node:assert/strict";
import {
  fakeBin,
  freePorts,
  inProcessSite,
  launch,
  listDir,
  listening,
  makeRoot,
  pathWith,
  siteArgs,
  STAND_IN_CATALOGUE,
} from "../support/helpers.ts";
import {
  fakeDevices,
  fakeGpuMachine,
  nvidiaSmiScript,
} from "../support/fake_gpus.ts";
import { catalogueText, seedFootprints } from "../support/gpu_cards.ts";
import { COLUMNS } from "../../src/status/table.ts";
import { PLAN_COLUMNS } from "../../src/serve/start_plan.ts";
import type { StartPlan } from "../../src/serve.ts";
import { within } from "../../src/common/sleep.ts";

const MOD = new URL("../../mod.ts", import.meta.url).pathname;
const EMBED = ["qwen3-embedding-0.6b", "bge-m3", "nomic-embed-text-v1.5"];
const KEY = "sk-dry-run-test-key";
const GIB = 1024 ** 3;

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the CLI to its end (a start that fails, or a dry run). */
async function cli(args: string[], env: Record<string, string>): Promise<Run> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--quiet", MOD, ...args],
    env: { NO_COLOR: "1", NUCLEUS_MODE: "dev", ...env },
    stdin: "null",
  }).output();
  const text = new TextDecoder();
  return {
    code: out.code,
    stdout: text.decode(out.stdout),
    stderr: text.decode(out.stderr),
  };
}

/** Every path under `dir` with its size and mtime: "written" shows as a difference. */
function tree(dir: string): string[] {
  const out: string[] = [];
  for (const entry of Deno.readDirSync(dir)) {
    const path = `${dir}/${entry.name}`;
    const info = Deno.lstatSync(path);
    out.push(`${path} ${info.size} ${info.mtime?.getTime()}`);
    if (entry.isDirectory) out.push(...tree(path));
  }
  return out.sort();
}

/** A root, stand-in engines, 8 fake GPUs and a record directory, removed on dispose. */
async function site(catalogue?: Record<string, Record<string, unknown>>) {
  const root = await makeRoot();
  const bin = await fakeBin();
  const records = await Deno.makeTempDir({ prefix: "serve-rec-" });
  const gpus = await fakeGpuMachine({ devices: fakeDevices(8) });
  let file: string | undefined;
  if (catalogue) {
    file = `${records}.yaml`;
    await Deno.writeTextFile(file, catalogueText(catalogue));
  }
  const port = freePorts(8);
  const env = {
    PATH: pathWith(`${bin}:${gpus.bin}`),
    FAKE_GPU_LEDGER: gpus.ledger,
    FAKE_ENGINE_RECORD_DIR: records,
  };
  return {
    root,
    bin,
    gpus,
    records,
    port,
    env,
    /** The catalogue file written from `catalogue`, if one was given. */
    catalogue: file,
    /** Flags for the site: loopback, the port block, the root, the catalogue. */
    args: siteArgs(port, root, file ?? null),
    async [Symbol.asyncDispose]() {
      await gpus[Symbol.asyncDispose]();
      for (const dir of [root, bin, records, ...(file ? [file] : [])]) {
        await Deno.remove(dir, { recursive: true }).catch(() => {});
      }
    },
  };
}

/** Nothing spawned (no stand-in engine wrote its record), nothing listening, the root as it was. */
async function assertUntouched(
  s: Awaited<ReturnType<typeof site>>,
  before: string[],
  engines: number,
): Promise<void> {
  assert.deepEqual(listDir(s.records), [], "an engine was spawned");
  assert.deepEqual([...(await s.gpus.procs()).keys()], [], "GPU memory taken");
  for (let p = s.port; p <= s.port + engines; p++) {
    assert.ok(!(await listening(p)), `port ${p} listens`);
  }
  assert.deepEqual(
    tree(s.root),
    before,
    "something was written under the root",
  );
}

Deno.test("--dry-run prints the shipped catalogue's embedding shares on 8 GPUs: engines in the status view's order, command lines with the key as ***, start-gate waits, GPU rows; --json the same plan", async () => {
  await using s = await site();
  const before = tree(s.root);
  const env = { ...s.env, LOCAL_ENGINE_API_KEY: KEY };
  const human = await cli([...EMBED, ...s.args, "--dry-run"], env);
  assert.equal(human.code, 0, human.stderr);
  assert.ok(!human.stdout.includes(KEY) && !human.stderr.includes(KEY));
  const lines = human.stdout.split("\n");
  const header = lines.find((l) => l.startsWith("MODEL"))!;
  assert.deepEqual(header.split(/ {3,}/), [...PLAN_COLUMNS]);
  const row = (name: string) => lines.find((l) => l.startsWith(`${name} `))!;
  assert.match(
    row("qwen3-embedding-0.6b"),
    /embed +vllm +\d+ +0 \(0\.3\) +- +http/,
  );
  assert.match(row("bge-m3"), / 0 \(0\.3\) +qwen3-embedding-0\.6b +http/);
  assert.match(
    row("nomic-embed-text-v1.5"),
    / 0 \(0\.2\) +qwen3-embedding-0\.6b,bge-m3 /,
  );
  assert.ok(
    lines.some((l) =>
      l.trim() ===
        `vllm serve BAAI/bge-m3 --host 127.0.0.1 --port ${
          s.port + 2
        } --served-model-name bge-m3 --api-key '***' --runner pooling --max-model-len 8192 --gpu-memory-utilization 0.3`
    ),
    human.stdout,
  );
  assert.match(
    human.stdout,
    /CUDA_VISIBLE_DEVICES=0 CUDA_DEVICE_ORDER=PCI_BUS_ID/,
  );
  assert.match(human.stdout, /^GPU pool 0-7 \(from nvidia-smi\)$/m);
  assert.match(
    human.stdout,
    /^0 +81920 MiB +81920 MiB +qwen3-embedding-0\.6b 0\.3 \(24576 MiB estimated\), bge-m3 0\.3 \(24576 MiB estimated\), nomic-embed-text-v1\.5 0\.2 \(16384 MiB estimated\) +65536 MiB +16384 MiB +-$/m,
  );

  const json = await cli([...EMBED, ...s.args, "--dry-run", "--json"], env);
  assert.equal(json.code, 0, json.stderr);
  const plan = JSON.parse(json.stdout) as StartPlan;
  assert.equal(plan.ok, true);
  assert.deepEqual(
    plan.engines.map((e) => [e.name, e.gpus, e.share, e.waits_for]),
    [
      ["qwen3-embedding-0.6b", ["0"], 0.3, []],
      ["bge-m3", ["0"], 0.3, ["qwen3-embedding-0.6b"]],
      ["nomic-embed-text-v1.5", ["0"], 0.2, ["qwen3-embedding-0.6b", "bge-m3"]],
    ],
  );
  const bge = plan.engines[1]!;
  assert.equal(bge.port, s.port + 2);
  assert.equal(bge.url, `http://127.0.0.1:${s.port + 2}/v1`);
  assert.equal(bge.engine, "vllm");
  assert.equal(bge.log, `${s.root}/logs/bge-m3.log`);
  assert.equal(bge.command[bge.command.indexOf("--api-key") + 1], "***");
  // Its compile caches under the root: the plan's, made only at a spawn.
  const cache = `${s.root}/data/cache/bge-m3`;
  assert.deepEqual(bge.env, {
    VLLM_CACHE_ROOT: `${cache}/vllm`,
    TORCHINDUCTOR_CACHE_DIR: `${cache}/torchinductor`,
    TRITON_CACHE_DIR: `${cache}/triton`,
    CUDA_VISIBLE_DEVICES: "0",
    CUDA_DEVICE_ORDER: "PCI_BUS_ID",
  });
  assert.equal(plan.gpus.length, 8);
  assert.deepEqual(plan.gpus[0], {
    device: "0",
    total_mib: 81920,
    free_mib: 81920,
    engines: [
      ...[
        ["qwen3-embedding-0.6b", 0.3],
        ["bge-m3", 0.3],
        ["nomic-embed-text-v1.5", 0.2],
      ].map(([name, share]) => ({
        name,
        share,
        // Nothing measured yet: each need is the card's share of the total, labelled so.
        need_mib: Math.ceil(Number(share) * 81920),
        need_from: `estimated: gpu-memory-utilization ${share}`,
      })),
    ],
    need_mib: 65536,
    left_mib: 81920 - 65536,
    holders: [],
  });
  // vLLM cards without --shutdown-timeout: SIGTERM is no drain (one line each).
  assert.deepEqual(
    plan.warnings,
    ["qwen3-embedding-0.6b", "bge-m3", "nomic-embed-text-v1.5"].map((name) =>
      `${name}: without --shutdown-timeout (vLLM v0.18+) its SIGTERM is no drain: a planned stop under steady traffic runs to its drain deadline, then cuts what is in flight`
    ),
  );
  // One nvidia-smi look (two queries at once), no separate pool detection.
  const calls = (await s.gpus.calls()).map((c) => c.args[0]).sort();
  assert.deepEqual(calls.length, 4, JSON.stringify(calls)); // two runs, two queries each
  await assertUntouched(s, before, EMBED.length);
});

Deno.test("the plan's engine columns keep the status view's order for the columns both show", () => {
  const shared = COLUMNS.filter((c) =>
    (PLAN_COLUMNS as readonly string[]).includes(c)
  );
  assert.deepEqual(shared, ["MODEL", "VERB", "GPUS", "URL"]);
  assert.deepEqual(
    PLAN_COLUMNS.filter((c) => (COLUMNS as readonly string[]).includes(c)),
    shared,
  );
});

Deno.test("--dry-run refuses what a start refuses with the same line and exit 1, also when placement fails halfway; nothing spawned, listening or written", async () => {
  await using s = await site({
    a: { gpus: 1 },
    b: { gpus: 1 },
    c: { gpus: 1, args: { "max-model-len": 4096 } },
  });
  const before = tree(s.root);
  const args = [...s.args, "--gpus", "0-1"];
  const dryRuns = new Map<string, Run>();
  for (
    const models of [["a", "b", "c"], ["a", "missing"], ["a", "a"]]
  ) {
    const start = await cli([...models, ...args], s.env);
    const dry = await cli([...models, ...args, "--dry-run"], s.env);
    dryRuns.set(models.join(" "), dry);
    assert.equal(start.code, 1, start.stderr);
    assert.equal(dry.code, 1, dry.stderr);
    assert.equal(dry.stdout, "");
    const line = start.stderr.trim().split("\n").at(-1)!;
    assert.equal(dry.stderr.trim().split("\n").at(-1), line);
    await assertUntouched(s, before, models.length);
  }
  const placement = dryRuns.get("a b c")!;
  assert.match(
    placement.stderr,
    /Cannot place c: needs 1 GPU, 0 free in pool 0-1/,
  );

  // A port someone else holds: the start's own line.
  using _held = Deno.listen({ hostname: "127.0.0.1", port: s.port + 1 });
  const start = await cli(["a", ...args], s.env);
  const dry = await cli(["a", ...args, "--dry-run", "--json"], s.env);
  assert.equal(dry.code, 1);
  // --json answers on stdout too: the same line as the error.
  assert.deepEqual(JSON.parse(dry.stdout), {
    ok: false,
    error: dry.stderr.trim().replace(/^\[serve\] error: /, ""),
  });
  assert.match(
    dry.stderr,
    /Cannot use port \d+ on 127\.0\.0\.1 for engine a: already in use/,
  );
  assert.equal(
    dry.stderr.trim().split("\n").at(-1),
    start.stderr.trim().split("\n").at(-1),
  );
  await assertUntouched(s, before, 0);
});

Deno.test("--json without --dry-run, and an unknown flag with --dry-run, are usage errors (exit 2)", async () => {
  await using s = await site();
  const json = await cli(["bge-m3", ...s.args, "--json"], s.env);
  assert.equal(json.code, 2);
  assert.match(json.stderr, /Cannot use --json without --dry-run/);
  const typo = await cli(["bge-m3", ...s.args, "--dry-rnu"], s.env);
  assert.equal(typo.code, 2);
  assert.match(typo.stderr, /did you mean --dry-run\?/);
});

Deno.test("weights that exceed what vLLM may use, or leave little for its KV cache, are warnings in the plan and in a real start's log; sparse files count by size; an unreadable weight file is a warning naming it", async () => {
  await using s = await site({
    big: { local: "big", args: { "gpu-memory-utilization": 0.4 } },
    snug: { local: "snug", args: { "gpu-memory-utilization": 0.4 } },
    split: {
      local: "split",
      args: { "tensor-parallel-size": 2, "gpu-memory-utilization": 0.4 },
    },
    broken: { local: "broken", args: { "gpu-memory-utilization": 0.4 } },
    hubonly: { args: { "gpu-memory-utilization": 0.1 } },
  });
  const sparse = async (path: string, bytes: number) => {
    await Deno.mkdir(path.slice(0, path.lastIndexOf("/")), { recursive: true });
    using file = await Deno.open(path, { create: true, write: true });
    await file.truncate(bytes);
  };
  await sparse(`${s.root}/models/big/model-00001.safetensors`, 40 * GIB);
  await sparse(`${s.root}/models/big/model-00002.safetensors`, 21 * GIB);
  // The .bin copy of the same weights is not counted twice.
  await sparse(`${s.root}/models/big/pytorch_model.bin`, 61 * GIB);
  await sparse(`${s.root}/models/snug/model.safetensors`, 30 * GIB);
  await sparse(`${s.root}/models/split/model.safetensors`, 60 * GIB);
  await Deno.mkdir(`${s.root}/models/broken`);
  await Deno.symlink(
    "/nonexistent/shard",
    `${s.root}/models/broken/model.safetensors`,
  );
  const models = ["big", "snug", "split", "broken", "hubonly"];
  const dry = await cli([...models, ...s.args, "--dry-run", "--json"], s.env);
  assert.equal(dry.code, 0, dry.stderr);
  const plan = JSON.parse(dry.stdout) as StartPlan;
  const noDrain = / its SIGTERM is no drain: /;
  assert.equal(plan.warnings.filter((w) => noDrain.test(w)).length, 5);
  assert.deepEqual(plan.warnings.filter((w) => !noDrain.test(w)), [
    "big: weights 61.0 GiB exceed the 32.0 GiB it may use on GPU 0 (gpu-memory-utilization 0.4 × 80 GiB): vLLM will fail to allocate its KV cache",
    "snug: weights 30.0 GiB take 94 % of the 32.0 GiB it may use on GPU 0 (gpu-memory-utilization 0.4 × 80 GiB): little is left for vLLM's KV cache",
    "split: weights 60.0 GiB take 94 % of the 64.0 GiB it may use on GPUs 1,2 (gpu-memory-utilization 0.4 × 80 GiB × tensor-parallel-size 2): little is left for vLLM's KV cache",
    `broken: cannot read its weights at ${s.root}/models/broken (No such file or directory (os error 2): stat '${s.root}/models/broken/model.safetensors'): their size is not compared with GPU memory`,
  ]);
  assert.equal(plan.engines[0]!.weights_bytes, 61 * GIB);
  assert.equal(plan.engines[4]!.weights_bytes, null);

  // A real start logs the same warnings (and starts anyway).
  await using started = await launch(["big", "hubonly"], {
    root: s.root,
    port: s.port,
    catalogue: s.catalogue!,
    bin: { "nvidia-smi": nvidiaSmiScript() },
    env: { FAKE_GPU_LEDGER: s.gpus.ledger },
  });
  await started.launcher.ready();
  assert.match(
    started.launcher.stderr,
    /warn: big: weights 61\.0 GiB exceed the 32\.0 GiB it may use on GPU 0 \(gpu-memory-utilization 0\.4 × 80 GiB\): vLLM will fail to allocate its KV cache/,
  );
  const metrics = await Deno.readTextFile(`${s.root}/metrics/${s.port}.prom`)
    .catch(() => "");
  if (metrics) {
    assert.match(metrics, /mymodel_launcher_start_warnings\{port="\d+"\} 1/);
  }
});

Deno.test("an args flag vLLM does not take is a warning with the closest known flag", async () => {
  await using s = await site({
    typo: {
      args: { "max-model-length": 4096, "no-enable-prefix-caching": true },
    },
  });
  const dry = await cli(["typo", ...s.args, "--dry-run"], s.env);
  assert.equal(dry.code, 0, dry.stderr);
  assert.match(
    dry.stdout,
    /typo: --max-model-length is not a known vLLM flag \(did you mean --max-model-len\?\)/,
  );
});

Deno.test("beside a launcher running on the same directory, --dry-run reports that launcher's models and ports as its own (exit 0); a start beside it is refused", async () => {
  await using running = await launch(["alpha"]);
  await running.launcher.ready();
  const root = running.root;
  const env = { PATH: pathWith(running.bin) };
  const args = ["alpha", ...siteArgs(running.port, root, STAND_IN_CATALOGUE)];
  const dry = await cli([...args, "--dry-run", "--json"], env);
  assert.equal(dry.code, 0, dry.stderr);
  const plan = JSON.parse(dry.stdout) as StartPlan;
  const pid = running.launcher.child.pid;
  assert.match(
    plan.warnings[0]!,
    new RegExp(
      `^launcher pid ${pid} already serves alpha from ${root}: a start beside it would refuse`,
    ),
  );
  assert.ok(
    plan.warnings.some((w) =>
      w.startsWith(
        `port ${running.port} on 127.0.0.1 for the management API: in use by launcher pid ${pid}, running on this directory`,
      )
    ),
    plan.warnings.join("\n"),
  );
  assert.ok(
    plan.warnings.some((w) =>
      w.startsWith(
        `port ${
          running.port + 1
        } on 127.0.0.1 for engine alpha: in use by engine alpha of launcher pid ${pid}`,
      )
    ),
    plan.warnings.join("\n"),
  );
  const start = await cli(args, env);
  assert.equal(start.code, 1);
  assert.match(
    start.stderr,
    new RegExp(`Cannot start alpha: launcher pid ${pid} already serves it`),
  );
});

Deno.test("Semioserve.plan() gives embedders the same plan, and a refusal as the start's error, with nothing left running", async () => {
  const { Semioserve } = await import("../../mod.ts");
  await using s = await inProcessSite();
  const port = freePorts(2);
  const options = {
    directory: s.root,
    catalogue: STAND_IN_CATALOGUE,
    host: "127.0.0.1",
    port,
    gpus: "none",
    handleSignals: false,
  };
  const plan = await new Semioserve({ ...options, models: ["alpha", "beta"] })
    .plan();
  assert.deepEqual(plan.engines.map((e) => [e.name, e.port, e.gpus]), [
    ["alpha", port + 1, null],
    ["beta", port + 2, null],
  ]);
  assert.equal(plan.gpu_pool.startsWith("GPUs not placed (--gpus none)"), true);
  await Semioserve.reset();
  // Without --gpus the plan asks nvidia-smi at once; the refusal waits for it.
  const { gpus: _, ...detected } = options;
  await assert.rejects(
    new Semioserve({ ...detected, models: ["alpha", "nope"] }).plan(),
    (error: Error) => error.name === "KeyError",
  );
  assert.ok(!(await listening(port + 1)));
});

// --- issue 43: what each model costs -----------------------------------------------

const H100 = "NVIDIA H100 80GB HBM3";

Deno.test("--dry-run with footprints in the book: two llama.cpp cards share a GPU, each need labelled measured; too much for what is free is a warning", async () => {
  const models = {
    a: { engine: "llama.cpp" },
    b: { engine: "llama.cpp" },
    c: { engine: "llama.cpp" },
    d: { engine: "llama.cpp" },
  };
  await using s = await site(models);
  await seedFootprints(
    s.root,
    models,
    { a: 30000, b: 40000, c: 20000 },
    (_, total) => ({
      weights_mib: total - 100,
      kv_cache_mib: 100,
      kv_tokens: 4096,
    }),
  );
  await s.gpus.addForeign("other", { pid: 4242, gpu: "0", mib: 20000 });
  const before = tree(s.root);
  const json = await cli(
    ["a", "b", "c", ...s.args, "--gpus", "0-1", "--dry-run", "--json"],
    s.env,
  );
  assert.equal(json.code, 0, json.stderr);
  const plan = JSON.parse(json.stdout) as StartPlan;
  // c does not fit beside a and b (90000 MiB > 81920): the next device.
  assert.deepEqual(plan.engines.map((e) => [e.name, e.gpus]), [
    ["a", ["0"]],
    ["b", ["0"]],
    ["c", ["1"]],
  ]);
  const measured = (mib: number) =>
    `measured ${mib} MiB on ${H100} at 2026-12-01T12:00:00.000Z`;
  assert.deepEqual(plan.gpus[0]!.engines, [
    { name: "a", share: 0.3662, need_mib: 30000, need_from: measured(30000) },
    { name: "b", share: 0.4883, need_mib: 40000, need_from: measured(40000) },
  ]);
  assert.equal(plan.gpus[0]!.need_mib, 70000);
  assert.equal(plan.gpus[0]!.free_mib, 81920 - 20000);
  assert.ok(
    plan.warnings.includes(
      `GPU 0: its engines need 70000 MiB (a 30000 MiB, ${
        measured(30000)
      }; b 40000 MiB, ${measured(40000)}), 61920 MiB free: they do not fit`,
    ),
    plan.warnings.join("\n"),
  );
  const human = await cli(
    ["a", "b", "c", ...s.args, "--gpus", "0-1", "--dry-run"],
    s.env,
  );
  assert.match(
    human.stdout,
    /^0 +81920 MiB +61920 MiB +a 0\.3662 \(30000 MiB measured\), b 0\.4883 \(40000 MiB measured\) +70000 MiB +-8080 MiB +pid 4242/m,
  );
  // d, never measured, takes a whole GPU as before, and its need says so.
  const fresh = await cli(
    ["d", "a", ...s.args, "--gpus", "0-1", "--dry-run", "--json"],
    s.env,
  );
  assert.equal(fresh.code, 0, fresh.stderr);
  const unmeasured = JSON.parse(fresh.stdout) as StartPlan;
  assert.deepEqual(unmeasured.engines.map((e) => [e.name, e.gpus]), [
    ["d", ["0"]],
    ["a", ["1"]],
  ]);
  assert.deepEqual(unmeasured.gpus[0]!.engines, [
    { name: "d", share: 1, need_mib: null, need_from: "not measured yet" },
  ]);
  await assertUntouched(s, before, 3);
});

Deno.test("--dry-run and a start refuse an over-commit of gpu_memory budgets in the same one line, exit 1, nothing written; a foreign book is a warning", async () => {
  const models = {
    x: { gpu_memory: "50GiB" },
    y: { gpu_memory: "40GiB", engine: "sglang" },
  };
  await using s = await site(models);
  const before = tree(s.root);
  const args = ["x", "y", ...s.args, "--gpus", "0"];
  const start = await cli(args, s.env);
  const dry = await cli([...args, "--dry-run"], s.env);
  assert.equal(start.code, 1, start.stderr);
  assert.equal(dry.code, 1, dry.stderr);
  const line = start.stderr.trim().split("\n").at(-1)!;
  assert.equal(dry.stderr.trim().split("\n").at(-1), line);
  assert.match(
    line,
    /Cannot place y: its gpu_memory 40960 MiB fits on no GPU: over-committed in pool 0 \(x holds 51200 MiB of 81920 MiB on GPU 0\)/,
  );
  await assertUntouched(s, before, 2);

  // Within the total: both on GPU 0, each engine's own knob in its command.
  await Deno.writeTextFile(`${s.root}/data/footprints.json`, "{oops");
  const fits = await cli(
    ["x", "y", ...s.args, "--gpus", "0-1", "--dry-run", "--json"],
    { ...s.env },
  );
  assert.equal(fits.code, 0, fits.stderr);
  const plan = JSON.parse(fits.stdout) as StartPlan;
  assert.deepEqual(plan.engines.map((e) => e.gpus), [["0"], ["1"]]);
  assert.deepEqual(plan.engines[0]!.command.slice(-2), [
    "--gpu-memory-utilization",
    "0.625",
  ]);
  assert.ok(
    plan.warnings.some((w) =>
      /^footprint book .*footprints\.json: not JSON .*: ignored; a start moves it aside/
        .test(w)
    ),
    plan.warnings.join("\n"),
  );
  assert.equal(
    await Deno.readTextFile(`${s.root}/data/footprints.json`),
    "{oops",
  );
});

Deno.test("a FIFO as the footprint book: --dry-run names it and ends, never opening it (issue 52 item 2)", async () => {
  const root = await makeRoot();
  const bin = await fakeBin();
  try {
    await new Deno.Command("mkfifo", { args: [`${root}/data/footprints.json`] })
      .output();
    // Bounded: the unfixed read blocked here for ever, SIGTERM or not.
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        "--quiet",
        MOD,
        "alpha",
        ...siteArgs(freePorts(2), root, STAND_IN_CATALOGUE),
        "--dry-run",
      ],
      env: { NO_COLOR: "1", NUCLEUS_MODE: "dev", PATH: pathWith(bin) },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const out = await within(child.output(), 30_000);
    if (!out) child.kill("SIGKILL");
    assert.ok(out, "the dry run ended");
    const said = new TextDecoder().decode(out.stdout);
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    assert.match(said, /footprint book .*footprints\.json: it is a FIFO/);
  } finally {
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});
