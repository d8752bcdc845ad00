/**
 * Each engine's compile caches under the root (`<root>/data/cache/<card>/…`):
 * set per kind in its plan's environment unless the card or the launcher's
 * environment sets them, never shared by two engines, made before the spawn.
 */
import assert from "node:assert/strict";
import { Registry } from "../../src/catalogue.ts";
import { type EngineSite, planEngine } from "../../src/engines/engine_plan.ts";
import { ServerProcess } from "../../src/engines/server_process.ts";
import { fakeBin, makeRoot } from "../support/helpers.ts";

const CARDS = Registry.parse(`models:
  v: { verb: chat, hub: org/v }
  w: { verb: chat, hub: org/w }
  s: { verb: chat, engine: sglang, hub: org/s }
  l: { verb: chat, engine: llama.cpp, hub: "org/l-GGUF:Q4_K_M" }
  own: { verb: chat, hub: org/own, env: { TRITON_CACHE_DIR: /fast/triton } }
`);

function site(root: string, bin: string, more: Record<string, string> = {}) {
  return {
    host: "127.0.0.1",
    port: 5001,
    directory: root,
    baseEnv: { PATH: `${bin}:/usr/bin:/bin`, ...more },
  } satisfies EngineSite;
}

async function withRoot(
  body: (root: string, bin: string) => void | Promise<void>,
) {
  const root = await makeRoot();
  const bin = await fakeBin(["vllm", "python3", "llama-server"]);
  try {
    await body(root, bin);
  } finally {
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
}

Deno.test("each kind's compile cache variables point under <root>/data/cache/<card>; llama.cpp has none", async () => {
  await withRoot((root, bin) => {
    const plan = (name: string) => planEngine(CARDS.get(name), site(root, bin));
    const v = plan("v");
    assert.equal(v.env.VLLM_CACHE_ROOT, `${root}/data/cache/v/vllm`);
    assert.equal(
      v.env.TORCHINDUCTOR_CACHE_DIR,
      `${root}/data/cache/v/torchinductor`,
    );
    assert.equal(v.env.TRITON_CACHE_DIR, `${root}/data/cache/v/triton`);
    const s = plan("s");
    assert.equal(s.env.SGLANG_DG_CACHE_DIR, `${root}/data/cache/s/deep_gemm`);
    assert.equal(s.env.TRITON_CACHE_DIR, `${root}/data/cache/s/triton`);
    assert.equal(s.env.VLLM_CACHE_ROOT, undefined);
    assert.deepEqual(s.caches.length, 3);
    const l = plan("l");
    assert.deepEqual(l.caches, []);
    assert.deepEqual(Object.keys(l.env).filter((k) => /CACHE/.test(k)), []);
  });
});

Deno.test("a card's env and the launcher's environment win over the launcher's cache directories", async () => {
  await withRoot((root, bin) => {
    const own = planEngine(CARDS.get("own"), site(root, bin));
    assert.equal(own.env.TRITON_CACHE_DIR, "/fast/triton");
    assert.ok(
      !own.caches.includes("/fast/triton"),
      "not the launcher's to make",
    );
    assert.equal(own.caches.length, 2);
    const given = planEngine(
      CARDS.get("v"),
      site(root, bin, { VLLM_CACHE_ROOT: "/shared/vllm" }),
    );
    assert.equal(given.env.VLLM_CACHE_ROOT, undefined, "inherited as it is");
    assert.deepEqual(given.caches, [
      `${root}/data/cache/v/torchinductor`,
      `${root}/data/cache/v/triton`,
    ]);
  });
});

Deno.test("two engines never share a cache directory", async () => {
  await withRoot((root, bin) => {
    const dirs = ["v", "w", "s"].flatMap((name) =>
      planEngine(CARDS.get(name), site(root, bin)).caches
    );
    assert.equal(dirs.length, 9);
    assert.equal(new Set(dirs).size, dirs.length);
  });
});

Deno.test("the cache directories are made under the root before the engine is spawned", async () => {
  await withRoot(async (root, bin) => {
    const plan = planEngine(CARDS.get("v"), site(root, bin));
    await using engine = new ServerProcess(plan);
    engine.start();
    for (const dir of plan.caches) {
      assert.ok(Deno.statSync(dir).isDirectory, dir);
      assert.ok(dir.startsWith(`${root}/data/cache/v/`), dir);
    }
  });
});
