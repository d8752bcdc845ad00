/**
 * Issue 51: an engine's plan holds its placement. Through the real CLI, with
 * stand-in engines recording each start's argv (`<port>.starts.jsonl`) and a
 * stand-in `nvidia-smi` on fake 80 GiB GPUs: `--dry-run`, the first start, a
 * crash restart and a failed engine's retry give the engine the same command
 * line and devices (its budget's flags included), and so do a reload's retry
and a reload that does not touch the card; a tensor-parallel card's
 * footprint is kept per device; a start with only llama.cpp cards looks at
 * the GPUs as its `--dry-run` does.
 */
import assert from "node:assert/strict";
import {
  fakeBin,
  freePorts,
  Launcher,
  makeRoot,
  models,
  pathWith,
  siteArgs,
  waitFor,
} from "../support/helpers.ts";
import { fakeDevices, fakeGpuMachine } from "../support/fake_gpus.ts";
import { catalogueText } from "../support/gpu_cards.ts";
import { footprintKey } from "../../src/gpu/footprint_book.ts";
import { catalogue, seedFootprints } from "../support/gpu_cards.ts";
import type { StartPlan } from "../../src/serve.ts";

const MOD = new URL("../../mod.ts", import.meta.url).pathname;
const H100 = "NVIDIA H100 80GB HBM3";

interface Start {
  argv: string[];
  pid: number;
  env: { CUDA_VISIBLE_DEVICES?: string };
}

/** A root, stand-in engines (vLLM, llama-server, SGLang's python3), `gpus` fake GPUs and a catalogue. */
async function site(
  cards: Record<string, Record<string, unknown>>,
  gpus = 2,
) {
  const root = await makeRoot();
  const bin = await fakeBin(["vllm", "llama-server", "python3"]);
  const records = await Deno.makeTempDir({ prefix: "serve-rec-" });
  const machine = await fakeGpuMachine({ devices: fakeDevices(gpus) });
  const file = `${records}.yaml`;
  await Deno.writeTextFile(file, catalogueText(cards));
  const port = freePorts(Object.keys(cards).length + 1);
  const env = {
    PATH: pathWith(`${bin}:${machine.bin}`),
    FAKE_GPU_LEDGER: machine.ledger,
    FAKE_ENGINE_RECORD_DIR: records,
    NUCLEUS_MODE: "dev",
    LOCAL_ENGINE_API_KEY: "",
  };
  const args = [...siteArgs(port, root, file), "--health-interval", "0.3"];
  return {
    root,
    port,
    env,
    args,
    catalogue: file,
    /** The CLI run to its end: a dry run. */
    async dryRun(extra: string[]): Promise<StartPlan> {
      const out = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", "--quiet", MOD, ...extra, ...args, "--dry-run"]
          .concat("--json"),
        env: { NO_COLOR: "1", ...env },
        stdin: "null",
      }).output();
      const text = new TextDecoder();
      assert.equal(out.code, 0, text.decode(out.stderr));
      return JSON.parse(text.decode(out.stdout)) as StartPlan;
    },
    start(extra: string[]): Launcher {
      return new Launcher([...extra, ...args], env);
    },
    /** Each start of the engine on `port`, in order. */
    async starts(enginePort: number): Promise<Start[]> {
      const text = await Deno.readTextFile(
        `${records}/${enginePort}.starts.jsonl`,
      ).catch(() => "");
      return text.split("\n").filter(Boolean).map((l) => JSON.parse(l));
    },
    async [Symbol.asyncDispose]() {
      await machine[Symbol.asyncDispose]();
      for (const dir of [root, bin, records, file]) {
        await Deno.remove(dir, { recursive: true }).catch(() => {});
      }
    },
  };
}

/** What a start hands the engine: its arguments and its devices. */
function handed(start: Start): [string[], string | undefined] {
  return [start.argv, start.env.CUDA_VISIBLE_DEVICES];
}

/** The dry run's command line and devices for engine `name`, as the engine gets them. */
function planned(
  plan: StartPlan,
  name: string,
): [string[], string | undefined] {
  const engine = plan.engines.find((e) => e.name === name)!;
  return [engine.command.slice(1), engine.env.CUDA_VISIBLE_DEVICES];
}

// Each exits at once with its kind's own argument error (a cause a restart
// cannot fix: the second such exit in a row is `failed`), never serving.
const HOPELESS = {
  "fake-crash-after-ms": 100,
  "fake-exit-code": 2,
  "fake-listen-after-ms": 60000,
};
const CARDS = {
  v: {
    engine: "vllm",
    gpu_memory: "24GiB",
    failed_retry: 0,
    args: { "fake-lines": "vllm-args", ...HOPELESS },
  },
  s: {
    engine: "sglang",
    gpu_memory: "16GiB",
    failed_retry: 0,
    args: { "fake-lines": "sglang-args", ...HOPELESS },
  },
  l: {
    engine: "llama.cpp",
    gpu_memory: "8GiB",
    failed_retry: 0,
    args: { "fake-print": "error: invalid argument: --bogus", ...HOPELESS },
  },
};

Deno.test("a card's budget survives a crash restart and a failed engine's retry (vLLM, SGLang, llama.cpp): --dry-run, the first start, the restart, a reload's retry and a reload not touching the card hand each engine the same command line and devices", async () => {
  await using s = await site(CARDS);
  const names = Object.keys(CARDS);
  const gpus = ["--gpus", "0-1"];
  const plan = await s.dryRun([...names, ...gpus]);
  const budget = {
    v: ["--gpu-memory-utilization", "0.3"],
    s: ["--mem-fraction-static", "0.2"],
    // 81920 MiB less the three budgets packed on GPU 0.
    l: ["--fit", "on", "--fit-target", String(81920 - 24576 - 16384 - 8192)],
  };
  for (const [name, args] of Object.entries(budget)) {
    const [argv, devices] = planned(plan, name);
    assert.deepEqual(argv.slice(-args.length), args, name);
    assert.equal(devices, "0", name);
  }
  await using launcher = s.start([...names, ...gpus]);
  await launcher.ready();
  const ports = names.map((_, i) => s.port + i + 1);
  const until = (check: () => Promise<boolean>, what: string) =>
    waitFor(check, what, 30_000).catch((error) => {
      throw new Error(`${error.message}:\n${launcher.stderr}`);
    });
  const allFailed = async () => {
    const active = (await models(s.port, true)).active;
    return names.every((n) => active[n]?.state === "failed");
  };
  // Start, a crash restart, then failed (the same hopeless cause twice).
  await until(allFailed, "all failed");
  // A reload retries each failed engine; then one whose only change does
  // not reach the engines (a description) retries them again.
  const reloads = [{ starts: 3 }, { starts: 4, description: "the same" }];
  for (const { starts, description } of reloads) {
    if (description) {
      await until(allFailed, "all failed again");
      const cards = Object.fromEntries(
        Object.entries(CARDS).map(([n, card]) => [n, { ...card, description }]),
      );
      await Deno.writeTextFile(s.catalogue, catalogueText(cards));
    }
    launcher.child.kill("SIGHUP");
    await until(
      async () =>
        (await Promise.all(ports.map((p) => s.starts(p))))
          .every((list) => list.length >= starts),
      `${starts} starts each`,
    );
  }
  const differ: string[] = [];
  for (const [i, name] of names.entries()) {
    const starts = await s.starts(ports[i]!);
    for (const [n, start] of starts.entries()) {
      const [argv, devices] = handed(start);
      const [want, wantDevices] = planned(plan, name);
      if (argv.join(" ") !== want.join(" ") || devices !== wantDevices) {
        differ.push(
          `${name}'s start ${n + 1}: ${argv.slice(-4).join(" ")} on ${devices}`,
        );
      }
    }
  }
  assert.deepEqual(differ, [], "each start as the dry run planned it");
});

Deno.test("a tensor-parallel card measured at 60000 MiB per GPU starts again: its footprint is kept per device, not summed over its GPUs", async () => {
  const cards = {
    tp: {
      engine: "vllm",
      args: { "tensor-parallel-size": 2, "fake-gpu-mib": 60000 },
    },
  };
  await using s = await site(cards);
  const args = ["tp", "--gpus", "0-1"];
  {
    await using first = s.start(args);
    await first.ready();
    await waitFor(async () => {
      const text = await Deno.readTextFile(`${s.root}/data/footprints.json`)
        .catch(() => "");
      return text.includes('"total_mib"');
    }, `the footprint booked:\n${first.stderr}`);
    await first.stop();
  }
  const plan = await s.dryRun(args);
  for (const gpu of plan.gpus) {
    assert.equal(gpu.engines[0]?.need_mib, 60000, JSON.stringify(gpu));
  }
  await using second = s.start(args);
  await second.ready();
  let detail = "";
  await waitFor(
    async () => {
      const tp = (await models(s.port, true)).active.tp;
      detail = JSON.stringify(tp?.waiting_for);
      return tp?.state === "ready";
    },
    `the second start ready (${detail})`,
    20_000,
  );
});

Deno.test("a start with only llama.cpp cards looks at the GPUs as its --dry-run does: gpu_memory is held, measured cards are packed alike, the book is written", async () => {
  const cards = {
    budget: {
      engine: "llama.cpp",
      gpu_memory: "8GiB",
      args: { "fake-footprint": "llama.cpp:1000,200,4096,100" },
    },
    a: { engine: "llama.cpp" },
    b: { engine: "llama.cpp" },
  };
  await using s = await site(cards);
  await seedFootprints(s.root, cards, { a: 30000, b: 40000 });
  const names = ["a", "b", "budget"];
  const args = [...names, "--gpus", "0-1"];
  const plan = await s.dryRun(args);
  assert.deepEqual(plan.engines.map((e) => [e.name, e.gpus]), [
    ["a", ["0"]],
    ["b", ["0"]],
    ["budget", ["0"]],
  ]);
  await using launcher = s.start(args);
  await launcher.ready();
  await waitFor(
    async () => {
      const active = (await models(s.port, true)).active;
      return names.every((n) => active[n]?.state === "ready");
    },
    `all ready:\n${launcher.stderr}`,
    30_000,
  );
  for (const [i, name] of names.entries()) {
    const [start] = await s.starts(s.port + i + 1);
    assert.deepEqual(handed(start!), planned(plan, name), name);
  }
  await waitFor(async () => {
    const text = await Deno.readTextFile(`${s.root}/data/footprints.json`);
    return JSON.parse(text).entries.some((e: { key: string; device: string }) =>
      e.device === H100 &&
      e.key === footprintKey(catalogue(cards).get("budget"))
    );
  }, "the budget card's footprint booked on its GPU's name");
});
