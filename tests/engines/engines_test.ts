/**
 * Each engine kind's command line, model resolution and missing-executable
 * errors, through an engine's plan and its `ServerProcess` (nothing is
 * spawned here).
 */
import assert from "node:assert/strict";
import { Registry } from "../../src/catalogue.ts";
import { ServerProcess } from "../../src/serve.ts";
import { EngineError } from "../../src/engines/engine_error.ts";
import { planEngine } from "../../src/engines/engine_plan.ts";
import { fakeBin, makeRoot, pathWith } from "../support/helpers.ts";

const CARDS = `
models:
  v: { verb: chat, hub: org/v, args: { max-model-len: 8192, enable-prefix-caching: true } }
  l: { verb: chat, engine: llama.cpp, hub: "bartowski/Some-GGUF:Q4_K_M", args: { ctx-size: 4096 } }
  ll: { verb: chat, engine: llama.cpp, local: tiny, args: [-ngl, "99"] }
  s: { verb: chat, engine: sglang, hub: Qwen/Qwen2.5-7B-Instruct, args: { tp: 2 } }
  c:
    verb: embed
    engine: command
    hub: org/c
    command: [my-engine, serve, "{model}", "--bind={host}:{port}", --name, "{name}", --key, "{api_key}"]
    args: [--extra]
  x: { verb: chat, hub: org/x, executable: /opt/nowhere/vllm }
`;

interface Env extends AsyncDisposable {
  root: string;
  bin: string;
  /** What the engines inherit: this process's environment, the stand-ins first on its PATH. */
  baseEnv: Record<string, string>;
}

async function env(): Promise<Env> {
  const root = await makeRoot();
  const bin = await fakeBin(["vllm", "llama-server", "my-engine"]);
  // This process's PATH stays as it is: test files run in parallel share it.
  return {
    root,
    bin,
    baseEnv: { ...Deno.env.toObject(), PATH: pathWith(bin) },
    async [Symbol.asyncDispose]() {
      await Deno.remove(root, { recursive: true });
      await Deno.remove(bin, { recursive: true });
    },
  };
}

const registry = Registry.parse(CARDS, "engines_test.yaml");

function engine(name: string, e: Env, apiKey = ""): ServerProcess {
  return new ServerProcess(
    planEngine(registry.get(name), {
      baseEnv: e.baseEnv,
      host: "127.0.0.1",
      port: 5001,
      directory: e.root,
      apiKey,
    }),
  );
}

Deno.test("vllm: serve <model> --host --port --served-model-name [--api-key] <args>", async () => {
  await using e = await env();
  const p = engine("v", e, "k3y");
  assert.equal(p.plan.executable, "vllm");
  assert.deepEqual(p.plan.args, [
    "serve",
    "org/v",
    "--host",
    "127.0.0.1",
    "--port",
    "5001",
    "--served-model-name",
    "v",
    "--api-key",
    "k3y",
    "--max-model-len",
    "8192",
    "--enable-prefix-caching",
  ]);
  assert.equal(p.url, "http://127.0.0.1:5001/v1");
  assert.ok(!p.commandLine.includes("k3y"));
  assert.match(p.commandLine, /--api-key \*\*\*/);
});

Deno.test("vllm: local weights win over the hub id", async () => {
  await using e = await env();
  await Deno.mkdir(`${e.root}/models/v`);
  const p = engine("v", e);
  assert.equal(p.plan.args[1], await Deno.realPath(`${e.root}/models/v`));
});

Deno.test("llama.cpp: a hub id becomes -hf, --alias names the model", async () => {
  await using e = await env();
  const p = engine("l", e);
  assert.equal(p.plan.executable, "llama-server");
  assert.deepEqual(p.plan.args, [
    "-hf",
    "bartowski/Some-GGUF:Q4_K_M",
    "-lv", // its buffer lines (the footprint) are printed at 4 only
    "4",
    "--host",
    "127.0.0.1",
    "--port",
    "5001",
    "--alias",
    "l",
    "--metrics", // issue 36: the launcher reads its /metrics
    "--ctx-size",
    "4096",
  ]);
});

Deno.test("llama.cpp: a local directory with one .gguf file resolves to that file (-m)", async () => {
  await using e = await env();
  await Deno.mkdir(`${e.root}/models/tiny`);
  await Deno.writeTextFile(`${e.root}/models/tiny/model.gguf`, "");
  await Deno.writeTextFile(`${e.root}/models/tiny/README.md`, "");
  const p = engine("ll", e, "key");
  const dir = await Deno.realPath(`${e.root}/models/tiny`);
  assert.deepEqual(p.plan.args.slice(0, 2), ["-m", `${dir}/model.gguf`]);
  assert.deepEqual(p.plan.args.slice(-5), [
    "--api-key",
    "key",
    "--metrics", // issue 36: the launcher reads its /metrics
    "-ngl",
    "99",
  ]);
});

Deno.test("llama.cpp: a split model resolves to its first shard; two unrelated files are refused", async () => {
  await using e = await env();
  await Deno.mkdir(`${e.root}/models/tiny`);
  for (const i of ["00002", "00001", "00003"]) {
    await Deno.writeTextFile(
      `${e.root}/models/tiny/m-${i}-of-00003.gguf`,
      "",
    );
  }
  assert.match(engine("ll", e).plan.args[1]!, /m-00001-of-00003\.gguf$/);
  await Deno.writeTextFile(`${e.root}/models/tiny/other.gguf`, "");
  assert.throws(() => engine("ll", e), {
    name: "EngineError",
    message: /holds 4 \.gguf files/,
  });
});

Deno.test("sglang: python3 -m sglang.launch_server --model-path ... --served-model-name", async () => {
  await using e = await env();
  const p = engine("s", e);
  assert.equal(p.plan.executable, "python3");
  assert.deepEqual(p.plan.args, [
    "-m",
    "sglang.launch_server",
    "--model-path",
    "Qwen/Qwen2.5-7B-Instruct",
    "--host",
    "127.0.0.1",
    "--port",
    "5001",
    "--served-model-name",
    "s",
    "--enable-metrics", // issue 36: the launcher reads its /metrics
    "--tp",
    "2",
  ]);
});

Deno.test("command: the template's placeholders are filled, the card's args appended", async () => {
  await using e = await env();
  const p = engine("c", e, "s3cret");
  assert.equal(p.plan.executable, "my-engine");
  assert.deepEqual(p.plan.args, [
    "serve",
    "org/c",
    "--bind=127.0.0.1:5001",
    "--name",
    "c",
    "--key",
    "s3cret",
    "--extra",
  ]);
});

Deno.test("command: without an API key the key and its flag are left out", async () => {
  await using e = await env();
  const p = engine("c", e, "");
  assert.deepEqual(p.plan.args, [
    "serve",
    "org/c",
    "--bind=127.0.0.1:5001",
    "--name",
    "c",
    "--extra",
  ]);
});

Deno.test("a missing executable names the engine, the executable and how to install it", async () => {
  await using e = await env();
  e.baseEnv.PATH = "/nonexistent";
  assert.throws(() => engine("v", e), {
    name: "EngineError",
    message:
      "Cannot prepare v: the vllm engine's executable 'vllm' is not on PATH (pip install vllm, or set the card's executable)",
  });
  assert.throws(() => engine("l", e), {
    message: /llama\.cpp engine's executable 'llama-server'.*engine:llama/,
  });
  assert.throws(() => engine("c", e), {
    message: /command engine's executable 'my-engine'/,
  });
});

Deno.test("a card's executable override is used, and checked", async () => {
  await using e = await env();
  assert.throws(() => engine("x", e), (error: unknown) => {
    assert.ok(error instanceof EngineError);
    assert.match(error.message, /'\/opt\/nowhere\/vllm' is not on PATH/);
    return true;
  });
});

Deno.test("IPv6 hosts are bracketed in URLs", async () => {
  await using e = await env();
  const p = new ServerProcess(
    planEngine(registry.get("v"), {
      baseEnv: e.baseEnv,
      host: "::1",
      port: 5001,
      directory: e.root,
    }),
  );
  assert.equal(p.url, "http://[::1]:5001/v1");
});
