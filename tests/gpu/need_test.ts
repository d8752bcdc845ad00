/** What each card needs (src/gpu/need.ts), without processes. */
import assert from "node:assert/strict";
import { gpuNeed, parseVisibleDevices } from "../../src/gpu/need.ts";
import { card, refusal, shipped } from "../support/gpu_cards.ts";

// --- what each card needs ----------------------------------------------------

Deno.test("the shipped cards need what their engine settings say", () => {
  const needs = (name: string) => {
    const need = gpuNeed(shipped.get(name));
    return need.kind === "whole"
      ? `whole ${need.count}`
      : need.kind === "share"
      ? `share ${need.share}`
      : "unplaced";
  };
  assert.equal(needs("llama-3.3-70b"), "whole 4");
  assert.equal(needs("qwen3-30b-a3b"), "whole 2");
  assert.equal(needs("qwen3-8b"), "share 0.9"); // vLLM's default
  assert.equal(needs("llama-3"), "share 0.9"); // stated
  assert.equal(needs("qwen3-embedding-0.6b"), "share 0.3");
  assert.equal(needs("bge-m3"), "share 0.3");
  assert.equal(needs("nomic-embed-text-v1.5"), "share 0.2");
  assert.equal(needs("bge-reranker-v2-m3"), "share 0.3");
  assert.equal(needs("whisper-large-v3-turbo"), "share 0.5");
  assert.equal(needs("deepseek-v3"), "whole 8"); // SGLang tp-size 8
  assert.equal(needs("llama-3.2-3b-gguf"), "whole 1"); // llama.cpp
  assert.equal(
    gpuNeed(shipped.get("qwen3-8b")).from,
    "gpu-memory-utilization 0.9 (vLLM's default)",
  );
  assert.equal(
    gpuNeed(shipped.get("llama-3.3-70b")).from,
    "tensor-parallel-size 4",
  );
});

Deno.test("vLLM needs tensor × pipeline × data parallel whole GPUs when above 1", () => {
  assert.deepEqual(
    gpuNeed(card({
      args: {
        "tensor-parallel-size": 2,
        "pipeline-parallel-size": 2,
        "data-parallel-size": 2,
        "gpu-memory-utilization": 0.5,
      },
    })),
    {
      kind: "whole",
      count: 8,
      from:
        "tensor-parallel-size 2 × pipeline-parallel-size 2 × data-parallel-size 2",
    },
  );
  assert.deepEqual(
    gpuNeed(card({ args: { "pipeline-parallel-size": 3 } })),
    { kind: "whole", count: 3, from: "pipeline-parallel-size 3" },
  );
  // A product of 1 falls back to the memory share.
  assert.deepEqual(
    gpuNeed(card({
      args: { "tensor-parallel-size": 1, "gpu-memory-utilization": 0.4 },
    })),
    { kind: "share", share: 0.4, from: "gpu-memory-utilization 0.4" },
  );
});

Deno.test("vLLM's short flags, --flag=value, underscores and the last occurrence are read as vLLM reads them", () => {
  const count = (args: string[]) => {
    const need = gpuNeed(card({ args }));
    return need.kind === "whole" ? need.count : need.kind;
  };
  assert.equal(count(["-tp", "2", "-pp", "2"]), 4);
  assert.equal(count(["-dp", "3"]), 3);
  assert.equal(count(["--tensor-parallel-size=4"]), 4);
  assert.equal(count(["--tensor_parallel_size", "2"]), 2);
  assert.equal(count(["-tp=2", "--enable-prefix-caching"]), 2);
  assert.equal(count(["-tp", "4", "--tensor-parallel-size", "2"]), 2);
  // Only the local data-parallel replicas run on this machine.
  assert.equal(
    count(["-tp", "2", "--data-parallel-size", "4", "-dpl", "2"]),
    4,
  );
  // A value that merely mentions a flag name is not read as one.
  assert.equal(
    count(["--hf-overrides", '{"--tensor-parallel-size": 8}']),
    "share",
  );
});

Deno.test("a vLLM card with distributed-executor-backend ray is not placed unless it states gpus", () => {
  for (
    const args of [
      { "distributed-executor-backend": "ray", "tensor-parallel-size": 8 },
      ["--distributed-executor-backend=ray"],
    ]
  ) {
    assert.equal(gpuNeed(card({ args })).kind, "unplaced");
  }
  assert.equal(
    gpuNeed(card({ args: { "distributed-executor-backend": "mp" } })).kind,
    "share",
  );
  assert.deepEqual(
    gpuNeed(card({
      gpus: 2,
      args: { "distributed-executor-backend": "ray" },
    })),
    { kind: "whole", count: 2, from: "gpus: 2" },
  );
});

Deno.test("SGLang needs tp-size ÷ nnodes whole GPUs, at least 1", () => {
  const need = (args: Record<string, unknown>) =>
    gpuNeed(card({ engine: "sglang", args }));
  assert.deepEqual(need({ "tp-size": 8, nnodes: 2 }), {
    kind: "whole",
    count: 4,
    from: "tp-size 8 ÷ nnodes 2",
  });
  assert.equal(
    (need({ "tp-size": 3, nnodes: 2 }) as { count: number }).count,
    2,
  );
  assert.equal(
    (need({ "tp-size": 2, nnodes: 4 }) as { count: number }).count,
    1,
  );
  assert.equal(
    (need({ "tensor-parallel-size": 4 }) as { count: number }).count,
    4,
  );
  assert.deepEqual(need({ "mem-fraction-static": 0.5 }), {
    kind: "whole",
    count: 1,
    from: "SGLang's default tp-size 1",
  });
});

Deno.test("llama.cpp needs one whole GPU; a command card is not placed unless it states gpus", () => {
  assert.deepEqual(gpuNeed(card({ engine: "llama.cpp" })), {
    kind: "whole",
    count: 1,
    from: "llama.cpp uses one GPU",
  });
  assert.deepEqual(gpuNeed(card({ engine: "command", command: ["x"] })), {
    kind: "unplaced",
    from: "engine command",
  });
  assert.deepEqual(
    gpuNeed(card({ engine: "command", command: ["x"], gpus: 1 })),
    { kind: "whole", count: 1, from: "gpus: 1" },
  );
});

Deno.test("a card's gpus overrides what its engine settings imply", () => {
  const tp4 = { "tensor-parallel-size": 4 };
  assert.deepEqual(gpuNeed(card({ gpus: 2, args: tp4 })), {
    kind: "whole",
    count: 2,
    from: "gpus: 2",
  });
  assert.deepEqual(gpuNeed(card({ gpus: 0.25, args: tp4 })), {
    kind: "share",
    share: 0.25,
    from: "gpus: 0.25",
  });
  assert.deepEqual(gpuNeed(card({ gpus: 0, engine: "llama.cpp" })), {
    kind: "whole",
    count: 0,
    from: "gpus: 0",
  });
});

Deno.test("a card whose env sets CUDA_VISIBLE_DEVICES is pinned: whole devices unless gpus is a share", () => {
  assert.deepEqual(
    gpuNeed(card({ env: { CUDA_VISIBLE_DEVICES: "2, 3" }, gpus: 1 })),
    {
      kind: "whole",
      count: 2,
      from: "pinned by its CUDA_VISIBLE_DEVICES",
      pinned: ["2", "3"],
    },
  );
  assert.deepEqual(
    gpuNeed(card({ env: { CUDA_VISIBLE_DEVICES: "1" }, gpus: 0.3 })),
    {
      kind: "share",
      share: 0.3,
      from: "pinned by its CUDA_VISIBLE_DEVICES",
      pinned: ["1"],
    },
  );
  assert.deepEqual(
    gpuNeed(
      card({
        engine: "command",
        command: ["x"],
        env: { CUDA_VISIBLE_DEVICES: "" },
      }),
    ),
    {
      kind: "whole",
      count: 0,
      from: "pinned by its CUDA_VISIBLE_DEVICES",
      pinned: [],
    },
  );
});

Deno.test("a parallel size or memory share that is not a usable number is refused, naming the card and flag", () => {
  assert.equal(
    refusal(() => gpuNeed(card({ args: { "tensor-parallel-size": "four" } }))),
    `Cannot place m: its tensor-parallel-size is "four" (expected a whole number, 1 or more; or set the card's gpus)`,
  );
  assert.match(
    refusal(() => gpuNeed(card({ args: ["-pp", "0"] }))),
    /^Cannot place m: its pipeline-parallel-size is "0" \(expected a whole number/,
  );
  assert.equal(
    refusal(() => gpuNeed(card({ args: { "gpu-memory-utilization": 1.5 } }))),
    `Cannot place m: its gpu-memory-utilization is "1.5" (expected a fraction of a GPU above 0 and at most 1)`,
  );
  assert.match(
    refusal(() =>
      gpuNeed(card({ engine: "sglang", args: { "tp-size": 8, nnodes: "x" } }))
    ),
    /^Cannot place m: its nnodes is "x"/,
  );
});

Deno.test("parseVisibleDevices keeps entries as written and stops where CUDA stops", () => {
  assert.deepEqual(parseVisibleDevices("0, 2,GPU-ab-12,2"), [
    "0",
    "2",
    "GPU-ab-12",
  ]);
  assert.deepEqual(parseVisibleDevices(""), []);
  assert.deepEqual(parseVisibleDevices("-1"), []);
  assert.deepEqual(parseVisibleDevices("0,-1,1"), ["0"]);
});
