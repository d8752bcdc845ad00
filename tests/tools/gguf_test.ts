import assert from "node:assert/strict";
import { gguf, GGUFValueType } from "@huggingface/gguf";
import {
  array,
  bool,
  encodeGguf,
  f32,
  GGUF_MAGIC,
  i32,
  str,
  tinyLlama,
  u32,
} from "../../tools/gguf.ts";
import { writeTinyModel } from "../../tools/tiny_model.ts";
import {
  isLlamaServerBuilt,
  llamaServerPath,
} from "../../tools/llama_server.ts";

const E = 64, V = 260, F = 128, BLOCKS = 2;

/** The tensors the llama loader expects for the default tiny model, in ggml order. */
function expectedTensors(): Map<string, bigint[]> {
  const dims = new Map<string, bigint[]>();
  const big = (...sizes: number[]) => sizes.map(BigInt);
  dims.set("token_embd.weight", big(E, V));
  for (let b = 0; b < BLOCKS; b++) {
    dims.set(`blk.${b}.attn_norm.weight`, big(E));
    for (const t of ["attn_q", "attn_k", "attn_v", "attn_output"]) {
      dims.set(`blk.${b}.${t}.weight`, big(E, E));
    }
    dims.set(`blk.${b}.ffn_norm.weight`, big(E));
    dims.set(`blk.${b}.ffn_gate.weight`, big(E, F));
    dims.set(`blk.${b}.ffn_up.weight`, big(E, F));
    dims.set(`blk.${b}.ffn_down.weight`, big(F, E));
  }
  dims.set("output_norm.weight", big(E));
  dims.set("output.weight", big(E, V));
  return dims;
}

/** Parses GGUF bytes with @huggingface/gguf, through a temporary file. */
async function parse(bytes: Uint8Array) {
  const path = await Deno.makeTempFile({ suffix: ".gguf" });
  try {
    await Deno.writeFile(path, bytes);
    return await gguf(path, { allowLocalFile: true, typedMetadata: true });
  } finally {
    await Deno.remove(path);
  }
}

function view(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

Deno.test("encodeGguf writes the magic, version 3 and the u64 counts", () => {
  const bytes = encodeGguf({
    metadata: { "general.architecture": str("llama"), "a.b": u32(7) },
    tensors: [
      { name: "x", dims: [3], data: new Float32Array([1, 2, 3]) },
      { name: "y", dims: [2, 2], data: new Float32Array(4) },
      { name: "z", dims: [1], data: new Float32Array(1) },
    ],
  });
  assert.deepEqual(bytes.subarray(0, 4), GGUF_MAGIC);
  assert.equal(new TextDecoder().decode(bytes.subarray(0, 4)), "GGUF");
  const dv = view(bytes);
  assert.equal(dv.getUint32(4, true), 3);
  assert.equal(dv.getBigUint64(8, true), 3n);
  assert.equal(dv.getBigUint64(16, true), 2n);
  // First key: u64 length, then the bytes, then its u32 type (8 = string).
  assert.equal(dv.getBigUint64(24, true), 20n);
  assert.equal(
    new TextDecoder().decode(bytes.subarray(32, 52)),
    "general.architecture",
  );
  assert.equal(dv.getUint32(52, true), 8);
  assert.equal(bytes.length % 32, 0);
});

Deno.test("encodeGguf round-trips every value type and aligns tensor data", async () => {
  const tensorX = new Float32Array([1.5, -2, 3.25]); // 12 bytes: needs padding
  const tensorY = Float32Array.from({ length: 10 }, (_, i) => i / 4);
  const bytes = encodeGguf({
    metadata: {
      "t.u32": u32(0xffff_ffff),
      "t.i32": i32(-5),
      "t.f32": f32(0.5),
      "t.bool": bool(true),
      "t.string": str("héllo ✓"),
      "t.u32s": array("u32", [1, 2, 3]),
      "t.i32s": array("i32", Int32Array.from([-1, 0, 1])),
      "t.f32s": array("f32", [0.25, -0.75]),
      "t.bools": array("bool", [true, false]),
      "t.strings": array("string", ["a", "", "ccc"]),
    },
    tensors: [
      { name: "x", dims: [3], data: tensorX },
      { name: "y", dims: [5, 2], data: tensorY },
    ],
  });
  const parsed = await parse(bytes);
  const m = parsed.typedMetadata;
  assert.deepEqual(m["t.u32"], {
    value: 0xffff_ffff,
    type: GGUFValueType.UINT32,
  });
  assert.deepEqual(m["t.i32"], { value: -5, type: GGUFValueType.INT32 });
  assert.deepEqual(m["t.f32"], { value: 0.5, type: GGUFValueType.FLOAT32 });
  assert.deepEqual(m["t.bool"], { value: true, type: GGUFValueType.BOOL });
  assert.deepEqual(m["t.string"], {
    value: "héllo ✓",
    type: GGUFValueType.STRING,
  });
  assert.deepEqual(m["t.u32s"]?.value, [1, 2, 3]);
  assert.equal(m["t.u32s"]?.subType, GGUFValueType.UINT32);
  assert.deepEqual(m["t.i32s"]?.value, [-1, 0, 1]);
  assert.equal(m["t.i32s"]?.subType, GGUFValueType.INT32);
  assert.deepEqual(m["t.f32s"]?.value, [0.25, -0.75]);
  assert.deepEqual(m["t.bools"]?.value, [true, false]);
  assert.equal(m["t.bools"]?.subType, GGUFValueType.BOOL);
  assert.deepEqual(m["t.strings"]?.value, ["a", "", "ccc"]);
  assert.equal(m["t.strings"]?.subType, GGUFValueType.STRING);

  const start = Number(parsed.tensorDataOffset);
  assert.equal(start % 32, 0);
  const [x, y] = parsed.tensorInfos;
  assert.deepEqual(x, {
    name: "x",
    n_dims: 1,
    shape: [3n],
    dtype: 0,
    offset: 0n,
  });
  assert.deepEqual(y, {
    name: "y",
    n_dims: 2,
    shape: [5n, 2n],
    dtype: 0,
    offset: 32n,
  });
  const dv = view(bytes);
  const read = (offset: bigint, n: number) =>
    Float32Array.from(
      { length: n },
      (_, i) => dv.getFloat32(start + Number(offset) + 4 * i, true),
    );
  assert.deepEqual(read(0n, 3), tensorX);
  assert.deepEqual(read(32n, 10), tensorY);
  // x's padding is zeros; the file ends on the alignment after y's 40 bytes.
  assert.deepEqual(bytes.subarray(start + 12, start + 32), new Uint8Array(20));
  assert.equal(bytes.length, start + 32 + 64);
});

Deno.test("encodeGguf honours general.alignment", async () => {
  const bytes = encodeGguf({
    metadata: { "general.alignment": u32(64) },
    tensors: [
      { name: "a", dims: [1], data: new Float32Array([1]) },
      { name: "b", dims: [1], data: new Float32Array([2]) },
    ],
  });
  const parsed = await parse(bytes);
  assert.equal(Number(parsed.tensorDataOffset) % 64, 0);
  assert.deepEqual(parsed.tensorInfos.map((t) => t.offset), [0n, 64n]);
  assert.equal(bytes.length % 64, 0);
});

Deno.test("encodeGguf rejects values that do not fit and malformed tensors", () => {
  const one = { name: "t", dims: [1], data: new Float32Array(1) };
  const cases: Array<[Parameters<typeof encodeGguf>[0], RegExp]> = [
    [
      { metadata: { k: u32(-1) }, tensors: [] },
      /'k' must hold integers in \[0, 2\^32\)/,
    ],
    [{ metadata: { k: u32(2 ** 32) }, tensors: [] }, /'k'/],
    [{ metadata: { k: i32(1.5) }, tensors: [] }, /'k' must hold integers/],
    [{ metadata: { k: array("i32", [2 ** 31]) }, tensors: [] }, /'k'/],
    [
      { metadata: { "general.alignment": u32(24) }, tensors: [] },
      /power of two/,
    ],
    [{ metadata: {}, tensors: [one, one] }, /tensor 't' appears twice/],
    [
      { metadata: {}, tensors: [{ ...one, dims: [2] }] },
      /needs 2 values, got 1/,
    ],
    [{ metadata: {}, tensors: [{ ...one, dims: [] }] }, /1 to 4 dims/],
    [
      { metadata: {}, tensors: [{ ...one, dims: [1, 1, 1, 1, 1] }] },
      /1 to 4 dims/,
    ],
    [
      { metadata: {}, tensors: [{ ...one, name: "n".repeat(65) }] },
      /1 to 64 bytes/,
    ],
  ];
  for (const [content, message] of cases) {
    assert.throws(() => encodeGguf(content), (error: unknown) => {
      assert.ok(error instanceof TypeError);
      assert.match(error.message, /^Cannot encode GGUF: /);
      assert.match(error.message, message);
      return true;
    });
  }
});

Deno.test("tinyLlama has the header, keys and tensors the llama loader needs", async () => {
  const bytes = tinyLlama();
  const dv = view(bytes);
  assert.deepEqual(bytes.subarray(0, 4), GGUF_MAGIC);
  assert.equal(dv.getUint32(4, true), 3);
  assert.equal(dv.getBigUint64(8, true), BigInt(1 + 9 * BLOCKS + 2));

  const parsed = await parse(bytes);
  const { metadata, typedMetadata: m, tensorInfos } = parsed;
  assert.equal(metadata.version, 3);
  assert.equal(metadata.tensor_count, 21n);
  assert.equal(metadata.kv_count, dv.getBigUint64(16, true));
  assert.equal(metadata["general.architecture"], "llama");
  assert.equal(m["general.name"]?.value, "mymodel-tiny-llama");
  const u32Keys: Record<string, number> = {
    "llama.context_length": 256,
    "llama.embedding_length": E,
    "llama.block_count": BLOCKS,
    "llama.feed_forward_length": F,
    "llama.attention.head_count": 4,
    "llama.attention.head_count_kv": 4,
    "llama.rope.dimension_count": E / 4,
    "tokenizer.ggml.bos_token_id": 1,
    "tokenizer.ggml.eos_token_id": 2,
    "tokenizer.ggml.unknown_token_id": 0,
  };
  for (const [key, value] of Object.entries(u32Keys)) {
    assert.deepEqual(m[key], { value, type: GGUFValueType.UINT32 }, key);
  }
  const eps = m["llama.attention.layer_norm_rms_epsilon"];
  assert.equal(eps?.type, GGUFValueType.FLOAT32);
  assert.ok(Math.abs((eps?.value as number) - 1e-5) < 1e-9);
  assert.equal(m["tokenizer.ggml.model"]?.value, "llama");

  const tokens = m["tokenizer.ggml.tokens"];
  assert.equal(tokens?.subType, GGUFValueType.STRING);
  const list = tokens?.value as string[];
  assert.equal(list.length, V);
  assert.deepEqual(list.slice(0, 4), ["<unk>", "<s>", "</s>", "<pad>"]);
  assert.equal(list[4], "<0x00>");
  assert.equal(list[4 + 0x0a], "<0x0A>");
  assert.equal(list[259], "<0xFF>");
  assert.equal(new Set(list).size, V);
  const scores = m["tokenizer.ggml.scores"];
  assert.equal(scores?.subType, GGUFValueType.FLOAT32);
  assert.equal((scores?.value as number[]).length, V);
  const types = m["tokenizer.ggml.token_type"];
  assert.equal(types?.subType, GGUFValueType.INT32);
  const typeList = types?.value as number[];
  assert.deepEqual(typeList.slice(0, 5), [2, 3, 3, 3, 6]);
  assert.ok(typeList.slice(4).every((t) => t === 6));
  const template = m["tokenizer.chat_template"]?.value;
  assert.equal(typeof template, "string");
  assert.match(template as string, /add_generation_prompt/);

  const expected = expectedTensors();
  assert.equal(tensorInfos.length, expected.size);
  assert.deepEqual(tensorInfos.map((t) => t.name), [...expected.keys()]);
  for (const info of tensorInfos) {
    assert.deepEqual(info.shape, expected.get(info.name), info.name);
    assert.equal(info.dtype, 0, `${info.name} is f32`);
    assert.equal(info.offset % 32n, 0n, `${info.name} is aligned`);
  }
  assert.equal(parsed.tensorDataOffset % 32n, 0n);
  // Every weight is small and finite; norms are exactly 1.
  const start = Number(parsed.tensorDataOffset);
  for (const info of tensorInfos) {
    const n = info.shape.reduce((a, b) => a * b, 1n);
    for (let i = 0; i < Number(n); i++) {
      const w = dv.getFloat32(start + Number(info.offset) + 4 * i, true);
      if (info.name.endsWith("norm.weight")) assert.equal(w, 1);
      else assert.ok(Math.abs(w) <= 0.05, `${info.name}[${i}] = ${w}`);
    }
  }
});

Deno.test("tinyLlama gives the same bytes for the same seed and others for another", () => {
  const a = tinyLlama({ seed: 7 });
  const b = tinyLlama({ seed: 7 });
  const c = tinyLlama({ seed: 8 });
  assert.deepEqual(a, b);
  assert.equal(a.length, c.length);
  assert.notDeepEqual(a, c);
  assert.deepEqual(tinyLlama(), tinyLlama({ seed: 1 }));
});

Deno.test("writeTinyModel creates the parent and leaves no temporary file", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const parent = `${dir}/nested/deeper`;
    const path = `${parent}/tiny.gguf`;
    await writeTinyModel(path);
    assert.deepEqual(await Deno.readFile(path), tinyLlama());
    const names = [];
    for await (const entry of Deno.readDir(parent)) names.push(entry.name);
    assert.deepEqual(names, ["tiny.gguf"]);

    // An existing file is replaced whole.
    await Deno.writeTextFile(path, "old");
    await writeTinyModel(path, { seed: 2 });
    assert.deepEqual(await Deno.readFile(path), tinyLlama({ seed: 2 }));

    // A failed rename (the target is a directory) leaves nothing behind.
    const blocked = `${dir}/blocked`;
    await Deno.mkdir(`${blocked}/tiny.gguf`, { recursive: true });
    await assert.rejects(writeTinyModel(`${blocked}/tiny.gguf`));
    const left = [];
    for await (const entry of Deno.readDir(blocked)) left.push(entry.name);
    assert.deepEqual(left, ["tiny.gguf"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("tiny_model.ts CLI exits 2 with one usage line on bad usage", async () => {
  const script = new URL("../../tools/tiny_model.ts", import.meta.url).pathname;
  for (const args of [[], ["a.gguf", "b.gguf"], ["--nope", "a.gguf"]]) {
    const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--allow-read", "--allow-write", script, ...args],
      stdin: "null",
    }).output();
    assert.equal(code, 2, args.join(" "));
    assert.equal(stdout.length, 0);
    const lines = new TextDecoder().decode(stderr).trim().split("\n");
    assert.equal(lines.length, 1);
    assert.match(lines[0] as string, /usage: .*tiny_model\.ts <out\.gguf>/);
  }
});

/** A port that was free a moment ago: bind port 0, read it, release it. */
function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr;
  listener.close();
  return port;
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls GET /health until it answers 200; fails if the process exits or time runs out. */
async function waitHealthy(
  base: string,
  hasExited: () => boolean,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "no answer";
  while (Date.now() < deadline) {
    if (hasExited()) {
      throw new Error("llama-server exited before it became healthy");
    }
    try {
      const res = await fetch(`${base}/health`);
      last = `${res.status} ${await res.text()}`;
      if (res.status === 200) return;
    } catch (error) {
      last = error instanceof Error ? error.message : String(error);
    }
    await delay(100);
  }
  throw new Error(
    `llama-server was not healthy after ${timeoutMs} ms (last: ${last})`,
  );
}

Deno.test("llama-server loads the tiny model and answers a chat completion", async () => {
  if (!isLlamaServerBuilt()) {
    assert.fail(
      `llama-server is not built (expected at ${llamaServerPath()}): run deno task engine:llama first`,
    );
  }
  const dir = await Deno.makeTempDir();
  const model = `${dir}/tiny.gguf`;
  await writeTinyModel(model);
  const port = freePort();
  const base = `http://127.0.0.1:${port}`;
  const child = new Deno.Command(llamaServerPath(), {
    args: [
      "-m",
      model,
      "--host",
      "127.0.0.1",
      "--port",
      String(port),
      "-c",
      "256",
      "-t",
      "2",
    ],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const output = Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
  ]);
  let exited = false;
  const status = child.status.then((s) => {
    exited = true;
    return s;
  });

  let failure: unknown;
  try {
    await waitHealthy(base, () => exited, 30_000);
    const res = await fetch(`${base}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "tiny",
        messages: [{ role: "user", content: "Hello" }],
        max_tokens: 8,
      }),
    });
    const text = await res.text();
    assert.equal(res.status, 200, text);
    const body = JSON.parse(text);
    assert.ok(Array.isArray(body.choices), text);
    assert.ok(body.choices.length >= 1, text);
    assert.equal(typeof body.choices[0].message?.content, "string", text);
  } catch (error) {
    failure = error;
  } finally {
    if (!exited) child.kill("SIGTERM");
  }
  const { code, signal } = await status;
  const [stdout, stderr] = await output;
  await Deno.remove(dir, { recursive: true });
  if (failure !== undefined) {
    const log = `${stdout}${stderr}`.trim().split("\n").slice(-30).join("\n");
    const message = failure instanceof Error
      ? failure.message
      : String(failure);
    throw new Error(
      `${message}\n--- llama-server output (last lines) ---\n${log}`,
      {
        cause: failure,
      },
    );
  }
  assert.equal(signal, null, "llama-server should exit by itself on SIGTERM");
  assert.equal(code, 0, `llama-server exit code after SIGTERM\n${stderr}`);
});
