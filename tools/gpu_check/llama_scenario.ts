/**
 * llama.cpp's `llama-server` through the launcher on the checked GPU, serving
 * the project's tiny GGUF (tools/tiny_model.ts) with every layer on the GPU,
 * answering one chat completion.
 *
 * On a real machine it needs `nvcc` (else it is skipped, saying so) and
 * builds llama-server with CUDA once (tools/llama_server.ts, cached). With
 * the stand-in it runs the CPU build when one is cached (the GPU placement
 * and gate are the stand-in's; the offload and memory checks need a GPU).
 *
 * @module
 */
import { freePorts } from "../../tests/support/helpers.ts";
import {
  buildLlamaServer,
  isLlamaServerBuilt,
  llamaServerPath,
} from "../llama_server.ts";
import { locateExecutable } from "../../src/engines/launch.ts";
import { writeTinyModel } from "../tiny_model.ts";
import type { Scenario } from "./scenario.ts";
import { seconds } from "./scenario.ts";
import { expect, until } from "./scope.ts";
import { allHealthy } from "./placement_scenarios.ts";

/** How long the CUDA build may take (a first build compiles every kernel). */
const BUILD_BOUND_MS = 45 * 60_000;

/** llama-server built with CUDA, all layers on the GPU, one chat completion. */
export const llamaCuda: Scenario = {
  id: "llama-cuda",
  title: "llama.cpp llama-server (CUDA build) with the tiny GGUF",
  async run(context) {
    const { world, scope } = context;
    const real = world.mode === "real";
    let binary: string;
    let built = "";
    if (real) {
      if (!locateExecutable("nvcc", Deno.env.get("PATH")).found) {
        return {
          skipped:
            "nvcc is not on PATH: llama.cpp's CUDA build needs the CUDA toolkit",
        };
      }
      const began = performance.now();
      binary = await buildLlamaServer({
        cuda: true,
        signal: AbortSignal.timeout(BUILD_BOUND_MS),
      });
      built = `build ${seconds(performance.now() - began)}; `;
    } else {
      if (!isLlamaServerBuilt()) {
        return {
          skipped:
            "stand-in: no llama-server built here (deno task engine:llama builds the CPU one)",
        };
      }
      binary = llamaServerPath();
    }
    await Deno.writeTextFile(
      `${world.bin}/llama-server`,
      `#!/bin/sh\nexec '${binary}' "$@"\n`,
      { mode: 0o755 },
    );
    await writeTinyModel(`${scope.root}/models/tiny-llama/tiny-llama.gguf`);
    const cards = {
      "tiny-gpu": {
        verb: "chat",
        local: "tiny-llama",
        engine: "llama.cpp",
        args: {
          "ctx-size": 256,
          parallel: 1,
          threads: 1,
          "no-warmup": true,
          "n-gpu-layers": 99,
        },
      },
    };
    const port = freePorts(2);
    const launcher = await scope.launch(cards, ["tiny-gpu"], port);
    const engines = await allHealthy(launcher, ["tiny-gpu"], 120_000);
    const engine = engines["tiny-gpu"]!;
    const began = performance.now();
    const response = await fetch(`${engine.url}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "tiny-gpu",
        messages: [{ role: "user", content: "Hello" }],
        max_tokens: 8,
      }),
      signal: AbortSignal.timeout(60_000),
    });
    const body = await response.json().catch(() => undefined);
    const answered = performance.now() - began;
    const content = body?.choices?.[0]?.message?.content;
    expect(
      response.status === 200 && typeof content === "string",
      "200 with choices[0].message.content",
      `${response.status} ${JSON.stringify(body).slice(0, 200)}`,
    );
    if (!real) {
      return {
        summary:
          `stand-in: the CPU build placed on GPU ${world.gpu.index} and answered a chat completion in ${
            seconds(answered)
          } (offload and GPU memory need a GPU)`,
      };
    }
    const log = await Deno.readTextFile(`${scope.root}/logs/tiny-gpu.log`);
    const offload = /offloaded (\d+)\/(\d+) layers to GPU/.exec(log);
    expect(
      offload !== null && offload[1] === offload[2],
      "every layer offloaded to the GPU (llama.cpp's log)",
      offload?.[0] ?? "no 'offloaded N/N layers to GPU' line",
    );
    const mib = await until(
      async () => (await world.listed())?.get(engine.pid ?? -1),
      10_000,
      250,
    );
    expect(
      mib !== undefined && mib > 0,
      `nvidia-smi listing llama-server (pid ${engine.pid}) on GPU ${world.gpu.index}`,
      "not listed",
    );
    return {
      summary: `${built}${
        offload![0]
      }; ${mib} MiB on GPU ${world.gpu.index}; answered a chat completion in ${
        seconds(answered)
      }`,
    };
  },
};
