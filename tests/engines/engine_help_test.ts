/** The engines' own help: its parsers on real formats, and the dry run's asking of it. */
import assert from "node:assert/strict";
import { flagWarnings } from "../../src/engines/engine_help.ts";
import { ENGINE_KINDS, registerEngineKind } from "../../src/engines/kinds.ts";
import { argparseFlags } from "../../src/engines/kinds/python.ts";
import type { EngineKind } from "../../src/engines/kinds/engine_kind.ts";
import { llamaServerFlags } from "../../src/engines/kinds/llama_cpp.ts";
import {
  isLlamaServerBuilt,
  llamaServerPath,
} from "../../tools/llama_server.ts";
import { catalogue, shipped } from "../support/gpu_cards.ts";
import { unknownFlagWarnings } from "../../src/engines/unknown_flags.ts";
import { pidAlive, waitFor, withinGuard } from "../support/helpers.ts";
import {
  LLAMA_SERVER_HELP,
  SGLANG_HELP,
  VLLM_HELP,
} from "../fixtures/engine_help.ts";

Deno.test("argparse help: every option line's flags and aliases, not the usage, metavars, prose or wrapped help", () => {
  const vllm = argparseFlags(VLLM_HELP);
  assert.deepEqual(vllm.slice(0, 7), [
    "--headless",
    "--api-server-count",
    "-asc",
    "-h",
    "--help",
    "--host",
    "--port",
  ]);
  for (
    const flag of [
      "--max-model-len",
      "-ml",
      "--enable-prefix-caching",
      "--no-enable-prefix-caching",
      "--tool-call-parser",
      "-dpl",
      "--fake-gpu-mib",
    ]
  ) assert.ok(vllm.includes(flag), flag);
  assert.ok(!vllm.some((f) => /^(--help=|-1k|-1K|-25)|[A-Z]{3}/.test(f)));
  assert.deepEqual(argparseFlags(SGLANG_HELP).slice(0, 6), [
    "-h",
    "--help",
    "--model-path",
    "--model",
    "--tokenizer-path",
    "--host",
  ]);
});

Deno.test("llama-server help: the aliases before the value hint, negations, long lines whose help goes to the next line, not flags named in the help text", () => {
  assert.deepEqual(llamaServerFlags(LLAMA_SERVER_HELP), [
    "-h",
    "--help",
    "--usage",
    "--version",
    "-t",
    "--threads",
    "-c",
    "--ctx-size",
    "-fa",
    "--flash-attn",
    "-ngl",
    "--gpu-layers",
    "--n-gpu-layers",
    "-m",
    "--model",
    "-hf",
    "-hfr",
    "--hf-repo",
    "--warmup",
    "--no-warmup",
    "-np",
    "--parallel",
    "-a",
    "--alias",
    "--host",
    "--port",
    "--api-key",
    "--jinja",
    "--no-jinja",
  ]);
});

const LLAMA_BUILT = isLlamaServerBuilt();

Deno.test({
  name:
    "the real llama-server --help parses to its flags: those the launcher passes, and every shipped llama.cpp card's",
  ignore: !LLAMA_BUILT,
  async fn() {
    const out = await new Deno.Command(llamaServerPath(), {
      args: [...ENGINE_KINDS["llama.cpp"]!.flags!.helpArgv],
      stdout: "piped",
      stderr: "null",
    }).output();
    assert.ok(out.success);
    const flags = llamaServerFlags(new TextDecoder().decode(out.stdout));
    assert.ok(flags.length > 100, String(flags.length));
    for (
      const flag of [
        "-m",
        "-hf",
        "-lv",
        "--host",
        "--port",
        "--alias",
        "--api-key",
      ]
    ) assert.ok(flags.includes(flag), flag);
    const kind = ENGINE_KINDS["llama.cpp"]!;
    for (const name of shipped.names()) {
      const card = shipped.get(name);
      if (card.engine !== kind.name) continue;
      assert.deepEqual(unknownFlagWarnings(card, kind, flags), [], name);
    }
  },
});
if (!LLAMA_BUILT) {
  console.warn(
    `skipped the real llama-server --help case: no build at ${llamaServerPath()} (deno task engine:llama builds it)`,
  );
}

/** A toy kind whose help is `executable ...helpArgv`, parsed as argparse. */
function toy(executable: string, helpArgv: string[]): EngineKind {
  return {
    name: "toy",
    title: "Toy",
    executable,
    install: "none",
    argv: () => [],
    devices: () => ({ kind: "unplaced", from: "engine toy" }),
    flags: { helpArgv, parseHelp: argparseFlags },
  };
}

/** Cards `a` and `b` of the toy kind, `a` with a typo. */
function toyCards() {
  const cards = catalogue({
    a: { engine: "toy", args: { "max-modl-len": 1 } },
    b: { engine: "toy", args: { "max-model-len": 1 } },
  });
  return [cards.get("a"), cards.get("b")];
}

Deno.test("an engine's help is asked once per executable, and each card's flags checked against it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "serve-help-" });
  try {
    const script = `${dir}/toy-engine`;
    await Deno.writeTextFile(
      script,
      `#!/bin/sh\necho "$@" >> '${dir}/calls'\nprintf 'options:\\n  --max-model-len MAX_MODEL_LEN\\n'\n`,
      { mode: 0o755 },
    );
    using _toy = registerEngineKind(toy(script, ["--help"]));
    assert.deepEqual(await flagWarnings(toyCards()), [
      "a: --max-modl-len is not a known Toy flag (did you mean --max-model-len?)",
    ]);
    assert.equal(await Deno.readTextFile(`${dir}/calls`), "--help\n");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("help that cannot be read is one 'flags not checked' line naming the cards and why", async () => {
  const cases: [string, string[], string][] = [
    [
      "no-such-engine-here",
      ["--help"],
      "no-such-engine-here not found on PATH",
    ],
    ["/nowhere/toy-engine", ["--help"], "/nowhere/toy-engine not found"],
    ["sh", ["-c", "echo oops >&2; exit 3"], "exited with code 3: oops"],
    ["sh", ["-c", "echo hello"], "sh -c echo hello listed no flags"],
  ];
  for (const [executable, helpArgv, why] of cases) {
    using _toy = registerEngineKind(toy(executable, helpArgv));
    const [line, ...rest] = await flagWarnings(toyCards());
    assert.deepEqual(rest, []);
    assert.match(line!, /^a, b: flags not checked \(.+\)$/);
    assert.ok(line!.includes(why), line);
  }
});

Deno.test("help that does not answer in time is killed with its process group", async () => {
  const dir = await Deno.makeTempDir({ prefix: "serve-help-" });
  try {
    // The help starts a child in its group, as vLLM's imports may, then hangs.
    using _toy = registerEngineKind(
      toy("sh", ["-c", `sleep 30 & echo $! > '${dir}/child'; wait`]),
    );
    // Waiting for the pipe would take the child's 30 s: the guard fails that.
    const [line] = await withinGuard(
      flagWarnings(toyCards(), { timeoutMs: 500 }),
      "the help",
    );
    assert.match(
      line!,
      /^a, b: flags not checked \(sh -c .+ gave no answer within 0\.5 s\)$/,
    );
    const child = Number(await Deno.readTextFile(`${dir}/child`));
    await waitFor(() => !pidAlive(child), "the help's child to die", 2_000);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
