/**
 * The footprint end to end over stand-in engines that print each kind's
 * memory lines at load (tests/fixtures/engine_lines.ts): `?detail=1` shows
 * it per engine (null for one that printed none) and the metrics file has
 * each known part and the KV tokens.
 */
import assert from "node:assert/strict";
import { getJson, launch, waitFor } from "../support/helpers.ts";
import { get, parse } from "../support/prometheus.ts";
import type { Footprint } from "../../src/engines/footprint.ts";
import { readBook } from "../../src/gpu/footprint_book.ts";
import {
  fakeDevices,
  fakeGpuMachine,
  nvidiaSmiScript,
} from "../support/fake_gpus.ts";

const CARDS = new URL("../fixtures/footprint.yaml", import.meta.url).pathname;
const NAMES = ["vllm-mem", "sglang-mem", "llama-mem", "quiet"];
const GIB = 1024;

Deno.test("each kind's memory lines give its footprint in ?detail=1 and in the metrics; none printed, null", async () => {
  await using s = await launch(NAMES, {
    catalogue: CARDS,
    args: ["--health-interval", "0.2"],
  });
  await s.launcher.ready();
  let active: Record<string, { state: string; footprint: Footprint | null }> =
    {};
  await waitFor(
    async () => {
      const { body } = await getJson(
        `http://127.0.0.1:${s.port}/models?detail=1`,
      );
      active = (body as { active: typeof active }).active;
      return NAMES.every((n) => active[n]?.state === "ready");
    },
    "all ready",
    30_000,
  );
  const figures = (name: string) => {
    const { measured_at, ...rest } = active[name]!.footprint!;
    assert.ok(!Number.isNaN(Date.parse(measured_at)), name);
    return rest;
  };
  assert.deepEqual(figures("vllm-mem"), {
    weights_mib: 15 * GIB,
    kv_cache_mib: 40 * GIB,
    kv_tokens: 90_841,
    graphs_mib: 0.5 * GIB,
    compute_mib: null,
    total_mib: 55.5 * GIB,
    device: null,
    from: "load lines",
  });
  assert.deepEqual(figures("sglang-mem"), {
    weights_mib: 2 * GIB,
    kv_cache_mib: 8 * GIB,
    kv_tokens: 65_536,
    graphs_mib: 1 * GIB,
    compute_mib: null,
    total_mib: 11 * GIB,
    device: null,
    from: "load lines",
  });
  assert.deepEqual(figures("llama-mem"), {
    weights_mib: 129.05,
    kv_cache_mib: 16,
    kv_tokens: 256,
    graphs_mib: null,
    compute_mib: 17.01,
    total_mib: 162.06,
    device: "CPU",
    from: "load lines",
  });
  assert.equal(active.quiet!.footprint, null);

  let text = "";
  await waitFor(
    async () => {
      text = await Deno.readTextFile(
        `${s.root}/metrics/mymodel_serve_${s.port}.prom`,
      )
        .catch(() => "");
      return text.includes("mymodel_engine_kv_cache_tokens");
    },
    "the footprint in the metrics file",
    10_000,
  );
  const families = parse(text);
  const bytes = get(families, "mymodel_engine_footprint_bytes").metrics;
  const part = (model: string, p: string) =>
    bytes.find((m) => m.labels?.model === model && m.labels?.part === p)?.value;
  assert.equal(Number(part("llama-mem", "weights")), 129.05 * 2 ** 20);
  assert.equal(Number(part("llama-mem", "total")), 162.06 * 2 ** 20);
  assert.equal(
    part("llama-mem", "graphs"),
    undefined,
    "a part not known is not written",
  );
  assert.equal(Number(part("vllm-mem", "kv_cache")), 40 * 2 ** 30);
  assert.equal(Number(part("sglang-mem", "graphs")), 2 ** 30);
  assert.ok(!bytes.some((m) => m.labels?.model === "quiet"));
  const tokens = get(families, "mymodel_engine_kv_cache_tokens").metrics;
  assert.deepEqual(
    Object.fromEntries(tokens.map((m) => [m.labels?.model, Number(m.value)])),
    { "vllm-mem": 90_841, "sglang-mem": 65_536, "llama-mem": 256 },
  );

  // The book keeps what the run measured, by the device its lines named
  // (no GPU here: vLLM's and SGLang's lines name none, so none is kept).
  const { entries, unreadable } = await readBook(s.root);
  assert.equal(unreadable, undefined);
  assert.deepEqual(
    entries.map((e) => [JSON.parse(e.key)[0], e.device, e.footprint.total_mib]),
    [["llama-mem", "CPU", 162.06]],
  );
});

Deno.test("a load line naming more than its GPU's total is dropped with one warning; the rest of the load counts", async () => {
  const gpus = await fakeGpuMachine({ devices: fakeDevices(1) });
  const dir = await Deno.makeTempDir({ prefix: "serve-cards-" });
  const cards = `${dir}/cards.yaml`;
  // 195.31 GiB of weights on an 80 GiB GPU.
  await Deno.writeTextFile(
    cards,
    'models:\n  huge: { verb: chat, hub: org/huge, args: { fake-footprint: "vllm:200000,40960,90841,512" } }\n',
  );
  try {
    await using s = await launch(["huge"], {
      catalogue: cards,
      args: ["--health-interval", "0.2"],
      bin: { "nvidia-smi": nvidiaSmiScript() },
      env: { FAKE_GPU_LEDGER: gpus.ledger },
    });
    await s.launcher.ready();
    let footprint: Footprint | null = null;
    await waitFor(async () => {
      const { body } = await getJson(
        `http://127.0.0.1:${s.port}/models?detail=1`,
      );
      const huge = (body as {
        active: Record<string, { state: string; footprint: Footprint | null }>;
      }).active.huge!;
      footprint = huge.footprint;
      return huge.state === "ready";
    }, "huge ready");
    const f = footprint! as Footprint;
    assert.equal(f.weights_mib, null, JSON.stringify(f));
    assert.equal(f.kv_cache_mib, 40 * GIB);
    const warned = s.launcher.lines.filter((l) =>
      /a load line's figure/.test(l)
    );
    assert.equal(warned.length, 1, s.launcher.stderr);
    assert.match(
      warned[0]!,
      /engine huge: a load line's figure "195\.31" ignored \(expected a number of MiB up to 81920, its device's total\)/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
    await gpus[Symbol.asyncDispose]();
  }
});
