/**
 * The shipped multi-node cards: the exact engine command line once the
 * per-node variables are set, and the launcher's refusal when one is not.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { Registry } from "../../src/catalogue.ts";
import { DEFAULT_CATALOGUE } from "../../src/catalogue/registry.ts";
import { ServerProcess } from "../../src/serve.ts";
import { planEngine } from "../../src/engines/engine_plan.ts";
import {
  fakeBin,
  freePorts,
  Launcher,
  listening,
  makeRoot,
  pathWith,
  siteArgs,
} from "../support/helpers.ts";

const registry = await Registry.load();
const SHIPPED = fileURLToPath(DEFAULT_CATALOGUE);
const SHIPPED_TEXT = await Deno.readTextFile(SHIPPED);

/** The 1-based line of the first line of the shipped catalogue matching `pattern`. */
function lineOf(pattern: RegExp): number {
  const index = SHIPPED_TEXT.split("\n").findIndex((l) => pattern.test(l));
  assert.ok(index >= 0, `${pattern} in the shipped catalogue`);
  return index + 1;
}

/** The engine's argv and env for a shipped card expanded with `env`. */
async function commandFor(
  name: string,
  env: Record<string, string>,
): Promise<{ executable: string; args: readonly string[]; env: object }> {
  const root = await makeRoot();
  const bin = await fakeBin(["vllm", "python3"]);
  try {
    const card = registry.expand(registry.get(name), env);
    const engine = new ServerProcess(
      planEngine(card, {
        // This process's PATH stays as it is: test files run in parallel share it.
        baseEnv: { ...Deno.env.toObject(), PATH: pathWith(bin) },
        host: "10.0.0.1",
        port: 5001,
        directory: root,
      }),
    );
    return {
      executable: engine.plan.executable,
      args: engine.plan.args,
      env: card.env,
    };
  } finally {
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
}

Deno.test("llama-3.1-405b runs vLLM over Ray: tp 8 x pp 2, RAY_ADDRESS from the environment", async () => {
  const { executable, args, env } = await commandFor("llama-3.1-405b", {
    RAY_ADDRESS: "10.0.0.1:6379",
  });
  assert.equal(executable, "vllm");
  assert.deepEqual(args, [
    "serve",
    "meta-llama/Llama-3.1-405B-Instruct",
    "--host",
    "10.0.0.1",
    "--port",
    "5001",
    "--served-model-name",
    "llama-3.1-405b",
    "--tensor-parallel-size",
    "8",
    "--pipeline-parallel-size",
    "2",
    "--distributed-executor-backend",
    "ray",
    "--max-model-len",
    "32768",
  ]);
  assert.deepEqual(env, { RAY_ADDRESS: "10.0.0.1:6379" });
  assert.equal(registry.get("llama-3.1-405b").gpus, 8);
});

Deno.test("deepseek-v3-2node runs SGLang on two nodes: tp 16, this node's rank and the rendezvous", async () => {
  for (const rank of ["0", "1"]) {
    const { executable, args } = await commandFor("deepseek-v3-2node", {
      NODE_RANK: rank,
      DIST_INIT_ADDR: "10.0.0.1:20000",
    });
    assert.equal(executable, "python3");
    assert.deepEqual(args, [
      "-m",
      "sglang.launch_server",
      "--model-path",
      "deepseek-ai/DeepSeek-V3-0324",
      "--host",
      "10.0.0.1",
      "--port",
      "5001",
      "--served-model-name",
      "deepseek-v3-2node",
      "--enable-metrics", // issue 36: the launcher reads its /metrics
      "--tp-size",
      "16",
      "--nnodes",
      "2",
      "--node-rank",
      rank,
      "--dist-init-addr",
      "10.0.0.1:20000",
      "--trust-remote-code",
      "--context-length",
      "65536",
      "--mem-fraction-static",
      "0.85",
    ]);
  }
});

/** Runs the launcher on the shipped catalogue without `unset` and expects a one-line refusal. */
async function refuses(
  model: string,
  env: Record<string, string>,
  expected: string,
): Promise<void> {
  const root = await makeRoot();
  const bin = await fakeBin(["vllm", "python3"]);
  const port = freePorts(2);
  try {
    await using launcher = new Launcher(
      [model, ...siteArgs(port, root, null)],
      {
        PATH: pathWith(bin),
        ...env,
      },
    );
    const status = await launcher.exited();
    assert.equal(status.code, 1, launcher.stderr);
    const lines = launcher.lines.filter((l) => l.trim() !== "");
    assert.equal(lines.length, 1, `one line, got:\n${launcher.stderr}`);
    assert.ok(lines[0]!.endsWith(expected), lines[0]);
    assert.ok(!(await listening(port)), "the API does not listen");
    assert.ok(!(await listening(port + 1)), "no engine listens");
    assert.equal(Deno.readDirSync(`${root}/logs`).toArray().length, 0);
  } finally {
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
}

Deno.test("the launcher refuses deepseek-v3-2node without NODE_RANK, naming file, card, field, line and variable", async () => {
  const line = lineOf(/node-rank: \$\{NODE_RANK\}/);
  await refuses(
    "deepseek-v3-2node",
    { DIST_INIT_ADDR: "10.0.0.1:20000" },
    `Cannot expand catalogue ${SHIPPED}: card 'deepseek-v3-2node', field 'args.node-rank' (line ${line}): \${NODE_RANK} is not set (expected NODE_RANK in the launcher's environment; write $\${ for a literal \${)`,
  );
});

Deno.test("the launcher refuses llama-3.1-405b without RAY_ADDRESS", async () => {
  const line = lineOf(/RAY_ADDRESS: \$\{RAY_ADDRESS\}/);
  await refuses(
    "llama-3.1-405b",
    {},
    `card 'llama-3.1-405b', field 'env.RAY_ADDRESS' (line ${line}): \${RAY_ADDRESS} is not set (expected RAY_ADDRESS in the launcher's environment; write $\${ for a literal \${)`,
  );
});
