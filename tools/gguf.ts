/**
 * A small GGUF v3 writer (little-endian) and a generator for the project's tiny
 * llama model: random f32 weights from a seeded PRNG and a byte-level vocabulary,
 * small enough to commit to memory and real enough for `llama-server` to load.
 *
 * ```ts
 * import { tinyLlama } from "./gguf.ts";
 * const bytes = tinyLlama({ seed: 1 });
 * await Deno.writeFile("/tmp/tiny.gguf", bytes);
 * ```
 *
 * Format: ggml `docs/gguf.md`. The file is the header (magic, version, tensor
 * count, key/value count), the key/values, the tensor infos, padding to the
 * alignment, then every tensor's data, each padded to the alignment.
 *
 * @module
 */

/** The four bytes every GGUF file starts with: `GGUF`. */
export const GGUF_MAGIC: Uint8Array = new Uint8Array([0x47, 0x47, 0x55, 0x46]);

/** The GGUF format version this writer emits. */
export const GGUF_VERSION = 3;

/** The alignment used when the metadata has no `general.alignment` key. */
export const GGUF_DEFAULT_ALIGNMENT = 32;

/** GGUF metadata value type codes (`gguf_type` in ggml), for the types this writer supports. */
export const GgufValueType = {
  UINT32: 4,
  INT32: 5,
  FLOAT32: 6,
  BOOL: 7,
  STRING: 8,
  ARRAY: 9,
} as const;

/** ggml tensor type code of 32-bit floats (`GGML_TYPE_F32`). */
export const GGML_TYPE_F32 = 0;

/** The ggml limit on tensor dimensions (`GGML_MAX_DIMS`). */
export const GGML_MAX_DIMS = 4;

/** Name of a scalar metadata type: also the element type of an array. */
export type GgufScalarType = "u32" | "i32" | "f32" | "bool" | "string";

/**
 * One metadata value, tagged with its GGUF type (a JavaScript number alone does
 * not say whether it is a u32, an i32 or an f32).
 */
export type GgufMetadataValue =
  | { type: "u32"; value: number }
  | { type: "i32"; value: number }
  | { type: "f32"; value: number }
  | { type: "bool"; value: boolean }
  | { type: "string"; value: string }
  | { type: "array"; itemType: "u32" | "i32" | "f32"; value: ArrayLike<number> }
  | { type: "array"; itemType: "bool"; value: ArrayLike<boolean> }
  | { type: "array"; itemType: "string"; value: ArrayLike<string> };

/** One f32 tensor to store. */
export interface GgufTensor {
  /** Tensor name, at most 64 bytes of UTF-8 (e.g. `blk.0.attn_q.weight`). */
  name: string;
  /**
   * Sizes in ggml order: `dims[0]` is the contiguous (fastest-varying)
   * dimension, i.e. the reverse of a row-major shape. One to four entries.
   */
  dims: readonly number[];
  /** The values, `dims` multiplied together of them, in row-major order. */
  data: Float32Array;
}

/** Everything a GGUF file holds. */
export interface GgufContent {
  /**
   * Key/values, written in iteration order. A `general.alignment` key (u32,
   * a power of two) sets the alignment; otherwise it is 32.
   */
  metadata: Record<string, GgufMetadataValue>;
  /** Tensors, written in this order. */
  tensors: readonly GgufTensor[];
}

/**
 * Tags a number as a GGUF u32 value.
 *
 * @param value An integer in [0, 2^32).
 * @returns The tagged value.
 */
export function u32(value: number): GgufMetadataValue {
  return { type: "u32", value };
}

/**
 * Tags a number as a GGUF i32 value.
 *
 * @param value An integer in [-2^31, 2^31).
 * @returns The tagged value.
 */
export function i32(value: number): GgufMetadataValue {
  return { type: "i32", value };
}

/**
 * Tags a number as a GGUF f32 value.
 *
 * @param value Any number; it is rounded to the nearest f32.
 * @returns The tagged value.
 */
export function f32(value: number): GgufMetadataValue {
  return { type: "f32", value };
}

/**
 * Tags a boolean as a GGUF bool value.
 *
 * @param value The boolean.
 * @returns The tagged value.
 */
export function bool(value: boolean): GgufMetadataValue {
  return { type: "bool", value };
}

/**
 * Tags a string as a GGUF string value (UTF-8, u64 length prefix).
 *
 * @param value The string.
 * @returns The tagged value.
 */
export function str(value: string): GgufMetadataValue {
  return { type: "string", value };
}

/**
 * Builds a GGUF array value of numbers.
 *
 * @param itemType The element type.
 * @param value The elements.
 * @returns The tagged value.
 */
export function array(
  itemType: "u32" | "i32" | "f32",
  value: ArrayLike<number>,
): GgufMetadataValue;
/**
 * Builds a GGUF array value of booleans.
 *
 * @param itemType `"bool"`.
 * @param value The elements.
 * @returns The tagged value.
 */
export function array(
  itemType: "bool",
  value: ArrayLike<boolean>,
): GgufMetadataValue;
/**
 * Builds a GGUF array value of strings.
 *
 * @param itemType `"string"`.
 * @param value The elements.
 * @returns The tagged value.
 */
export function array(
  itemType: "string",
  value: ArrayLike<string>,
): GgufMetadataValue;
export function array(
  itemType: GgufScalarType,
  value: ArrayLike<number> | ArrayLike<boolean> | ArrayLike<string>,
): GgufMetadataValue {
  return { type: "array", itemType, value } as GgufMetadataValue;
}

const utf8 = new TextEncoder();

/** Growable little-endian byte buffer. */
class ByteWriter {
  #bytes = new Uint8Array(1024);
  #view = new DataView(this.#bytes.buffer);
  #length = 0;

  get length(): number {
    return this.#length;
  }

  /**
   * Claims `extra` bytes and returns where they start. It may replace
   * `#bytes` and `#view`, so read those only after calling it.
   */
  #reserve(extra: number): number {
    const at = this.#length;
    const needed = at + extra;
    if (needed > this.#bytes.length) {
      let size = this.#bytes.length * 2;
      while (size < needed) size *= 2;
      const grown = new Uint8Array(size);
      grown.set(this.#bytes.subarray(0, at));
      this.#bytes = grown;
      this.#view = new DataView(grown.buffer);
    }
    this.#length = needed;
    return at;
  }

  u8(value: number): void {
    const at = this.#reserve(1);
    this.#view.setUint8(at, value);
  }

  u32(value: number): void {
    const at = this.#reserve(4);
    this.#view.setUint32(at, value, true);
  }

  i32(value: number): void {
    const at = this.#reserve(4);
    this.#view.setInt32(at, value, true);
  }

  f32(value: number): void {
    const at = this.#reserve(4);
    this.#view.setFloat32(at, value, true);
  }

  u64(value: number): void {
    const at = this.#reserve(8);
    this.#view.setBigUint64(at, BigInt(value), true);
  }

  bytes(value: Uint8Array): void {
    const at = this.#reserve(value.length);
    this.#bytes.set(value, at);
  }

  string(value: string): void {
    const encoded = utf8.encode(value);
    this.u64(encoded.length);
    this.bytes(encoded);
  }

  f32s(values: Float32Array): void {
    const at = this.#reserve(values.length * 4);
    for (let i = 0; i < values.length; i++) {
      this.#view.setFloat32(at + i * 4, values[i] as number, true);
    }
  }

  /** Appends zero bytes up to the next multiple of `alignment`. */
  pad(alignment: number): void {
    const extra = (alignment - (this.#length % alignment)) % alignment;
    const at = this.#reserve(extra);
    this.#bytes.fill(0, at, at + extra);
  }

  finish(): Uint8Array {
    return this.#bytes.slice(0, this.#length);
  }
}

const TYPE_CODES: Record<GgufScalarType, number> = {
  u32: GgufValueType.UINT32,
  i32: GgufValueType.INT32,
  f32: GgufValueType.FLOAT32,
  bool: GgufValueType.BOOL,
  string: GgufValueType.STRING,
};

function fail(detail: string): never {
  throw new TypeError(`Cannot encode GGUF: ${detail}`);
}

function checkScalar(
  key: string,
  type: GgufScalarType,
  value: unknown,
): void {
  switch (type) {
    case "u32":
      if (
        typeof value !== "number" || !Number.isInteger(value) || value < 0 ||
        value > 0xffff_ffff
      ) {
        fail(`'${key}' must hold integers in [0, 2^32), got ${value}`);
      }
      return;
    case "i32":
      if (
        typeof value !== "number" || !Number.isInteger(value) ||
        value < -0x8000_0000 || value > 0x7fff_ffff
      ) {
        fail(`'${key}' must hold integers in [-2^31, 2^31), got ${value}`);
      }
      return;
    case "f32":
      if (typeof value !== "number") {
        fail(`'${key}' must hold numbers, got ${typeof value}`);
      }
      return;
    case "bool":
      if (typeof value !== "boolean") {
        fail(`'${key}' must hold booleans, got ${typeof value}`);
      }
      return;
    case "string":
      if (typeof value !== "string") {
        fail(`'${key}' must hold strings, got ${typeof value}`);
      }
      return;
  }
}

function writeScalar(
  out: ByteWriter,
  type: GgufScalarType,
  value: number | boolean | string,
): void {
  switch (type) {
    case "u32":
      return out.u32(value as number);
    case "i32":
      return out.i32(value as number);
    case "f32":
      return out.f32(value as number);
    case "bool":
      return out.u8(value ? 1 : 0);
    case "string":
      return out.string(value as string);
  }
}

function writeValue(
  out: ByteWriter,
  key: string,
  entry: GgufMetadataValue,
): void {
  if (entry.type !== "array") {
    checkScalar(key, entry.type, entry.value);
    out.u32(TYPE_CODES[entry.type]);
    writeScalar(out, entry.type, entry.value);
    return;
  }
  const itemCode = TYPE_CODES[entry.itemType];
  if (itemCode === undefined) {
    fail(`'${key}' has an unsupported array element type '${entry.itemType}'`);
  }
  out.u32(GgufValueType.ARRAY);
  out.u32(itemCode);
  out.u64(entry.value.length);
  for (let i = 0; i < entry.value.length; i++) {
    const item = entry.value[i] as number | boolean | string;
    checkScalar(key, entry.itemType, item);
    writeScalar(out, entry.itemType, item);
  }
}

function alignmentOf(metadata: Record<string, GgufMetadataValue>): number {
  const entry = metadata["general.alignment"];
  if (entry === undefined) return GGUF_DEFAULT_ALIGNMENT;
  const value = entry.value;
  if (
    entry.type !== "u32" || typeof value !== "number" || value < 1 ||
    !Number.isInteger(value) || (value & (value - 1)) !== 0
  ) {
    fail("'general.alignment' must be a u32 power of two");
  }
  return value;
}

function checkTensor(tensor: GgufTensor, seen: Set<string>): void {
  const { name, dims, data } = tensor;
  if (utf8.encode(name).length > 64 || name.length === 0) {
    fail(`tensor name '${name}' must be 1 to 64 bytes long`);
  }
  if (seen.has(name)) fail(`tensor '${name}' appears twice`);
  seen.add(name);
  if (dims.length < 1 || dims.length > GGML_MAX_DIMS) {
    fail(
      `tensor '${name}' must have 1 to ${GGML_MAX_DIMS} dims, got ${dims.length}`,
    );
  }
  let count = 1;
  for (const size of dims) {
    if (!Number.isSafeInteger(size) || size < 1) {
      fail(`tensor '${name}' has an invalid size ${size} in [${dims}]`);
    }
    count *= size;
  }
  if (data.length !== count) {
    fail(
      `tensor '${name}' with dims [${dims}] needs ${count} values, got ${data.length}`,
    );
  }
}

/**
 * Encodes metadata and f32 tensors as a GGUF v3 file.
 *
 * @param content The key/values and tensors, each written in the given order.
 * @returns The whole file.
 * @throws {TypeError} when a value does not fit its type (a u32 out of range, a
 * non-integer i32), a tensor name is empty, longer than 64 bytes or repeated,
 * a tensor has 0 or more than 4 dims, or its data length is not the product of
 * its dims, or `general.alignment` is not a u32 power of two.
 *
 * @example
 * ```ts
 * import { encodeGguf, str, u32 } from "./gguf.ts";
 * const bytes = encodeGguf({
 *   metadata: { "general.architecture": str("llama"), "x.count": u32(2) },
 *   tensors: [{ name: "w", dims: [2], data: new Float32Array([1, 2]) }],
 * });
 * console.log(new TextDecoder().decode(bytes.subarray(0, 4))); // "GGUF"
 * ```
 */
export function encodeGguf(content: GgufContent): Uint8Array {
  const alignment = alignmentOf(content.metadata);
  const entries = Object.entries(content.metadata);
  const seen = new Set<string>();
  for (const tensor of content.tensors) checkTensor(tensor, seen);

  const out = new ByteWriter();
  out.bytes(GGUF_MAGIC);
  out.u32(GGUF_VERSION);
  out.u64(content.tensors.length);
  out.u64(entries.length);
  for (const [key, value] of entries) {
    out.string(key);
    writeValue(out, key, value);
  }

  let offset = 0;
  for (const { name, dims, data } of content.tensors) {
    out.string(name);
    out.u32(dims.length);
    for (const size of dims) out.u64(size);
    out.u32(GGML_TYPE_F32);
    out.u64(offset);
    const bytes = data.length * 4;
    offset += bytes + (alignment - (bytes % alignment)) % alignment;
  }
  out.pad(alignment);

  for (const { data } of content.tensors) {
    out.f32s(data);
    out.pad(alignment);
  }
  return out.finish();
}

/**
 * Creates a deterministic pseudo-random generator (SplitMix32-style mixing of a
 * 32-bit counter): the same seed always yields the same sequence, on any platform.
 *
 * @param seed Any number; only its low 32 bits are used.
 * @returns A function returning the next value in [0, 1).
 *
 * @example
 * ```ts
 * import { seededRandom } from "./gguf.ts";
 * const next = seededRandom(42);
 * console.log(next() === seededRandom(42)()); // true
 * ```
 */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return function next(): number {
    state = (state + 0x9e3779b9) | 0;
    let z = state;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    z ^= z >>> 16;
    return (z >>> 0) / 0x1_0000_0000;
  };
}

/** Options of {@linkcode tinyLlama}. The vocabulary is always the 260-token byte-level one. */
export interface TinyLlamaOptions {
  /**
   * Seed of the weights' PRNG.
   * @default {1}
   */
  seed?: number;
  /**
   * `general.name`.
   * @default {"mymodel-tiny-llama"}
   */
  name?: string;
  /**
   * Embedding length; must be a multiple of `headCount`.
   * @default {64}
   */
  embeddingLength?: number;
  /**
   * Number of transformer blocks.
   * @default {2}
   */
  blockCount?: number;
  /**
   * Attention heads.
   * @default {4}
   */
  headCount?: number;
  /**
   * Key/value heads.
   * @default {4}
   */
  headCountKv?: number;
  /**
   * Feed-forward length.
   * @default {128}
   */
  feedForwardLength?: number;
  /**
   * Training context length.
   * @default {256}
   */
  contextLength?: number;
  /**
   * Weights are uniform in [-weightScale, weightScale); norms are 1.
   * @default {0.05}
   */
  weightScale?: number;
  /**
   * Jinja chat template.
   * @default {TINY_CHAT_TEMPLATE}
   */
  chatTemplate?: string;
}

/**
 * The default chat template of the tiny model: one `role: content` line per
 * message, then `assistant:` when a generation prompt is asked for.
 */
export const TINY_CHAT_TEMPLATE: string = "{% for message in messages %}" +
  "{{ message['role'] }}: {{ message['content'] }}\n" +
  "{% endfor %}" +
  "{% if add_generation_prompt %}assistant:{% endif %}";

/** The byte-level vocabulary: tokens, scores and ggml token types. */
export interface ByteVocab {
  /** `<unk>`, `<s>`, `</s>`, `<pad>`, then `<0x00>` … `<0xFF>`. */
  tokens: string[];
  /** One score per token (all 0: the byte fallback does not use them). */
  scores: Float32Array;
  /** One `llama_token_type` per token: 2 unknown, 3 control, 6 byte. */
  tokenTypes: Int32Array;
}

/**
 * Builds the 260-token byte-level vocabulary of the tiny model. Byte tokens are
 * spelled `<0xAB>` with upper-case hex, as llama.cpp's byte fallback looks them up.
 *
 * @returns The tokens, scores and token types.
 */
export function byteVocab(): ByteVocab {
  const tokens = ["<unk>", "<s>", "</s>", "<pad>"];
  const types = [2, 3, 3, 3];
  for (let byte = 0; byte < 256; byte++) {
    tokens.push(
      `<0x${byte.toString(16).toUpperCase().padStart(2, "0")}>`,
    );
    types.push(6);
  }
  return {
    tokens,
    scores: new Float32Array(tokens.length),
    tokenTypes: Int32Array.from(types),
  };
}

function positive(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(
      `Cannot build the tiny model: ${name} must be a positive integer, got ${value}`,
    );
  }
  return value;
}

/**
 * Builds a tiny llama model as a GGUF file: f32 weights uniform in
 * ±`weightScale` from a seeded PRNG (so the same options give the same bytes),
 * RMS norms of 1, the byte-level {@linkcode byteVocab} (`tokenizer.ggml.model`
 * = `llama`, bos 1, eos 2, unk 0, pad 3) and a short chat template. With the
 * defaults the file is about 470 KB and loads in `llama-server`.
 *
 * @param options Sizes, seed and template; see {@linkcode TinyLlamaOptions}.
 * @returns The GGUF file.
 * @throws {RangeError} when a size is not a positive integer, `weightScale` is
 * negative or not finite, the embedding length is not a multiple of the head
 * count, or the head count is not a multiple of the key/value head count.
 *
 * @example
 * ```ts
 * import { tinyLlama } from "./gguf.ts";
 * const bytes = tinyLlama({ seed: 7 });
 * console.log(bytes.length > 400_000); // true
 * ```
 */
export function tinyLlama(options: TinyLlamaOptions = {}): Uint8Array {
  const seed = options.seed ?? 1;
  const embd = positive("embeddingLength", options.embeddingLength ?? 64);
  const blocks = positive("blockCount", options.blockCount ?? 2);
  const heads = positive("headCount", options.headCount ?? 4);
  const headsKv = positive("headCountKv", options.headCountKv ?? 4);
  const ff = positive("feedForwardLength", options.feedForwardLength ?? 128);
  const ctx = positive("contextLength", options.contextLength ?? 256);
  const scale = options.weightScale ?? 0.05;
  if (!Number.isFinite(scale) || scale < 0) {
    throw new RangeError(
      `Cannot build the tiny model: weightScale must be a finite number >= 0, got ${scale}`,
    );
  }
  if (embd % heads !== 0) {
    throw new RangeError(
      `Cannot build the tiny model: embeddingLength ${embd} must be a multiple of headCount ${heads}`,
    );
  }
  if (heads % headsKv !== 0) {
    throw new RangeError(
      `Cannot build the tiny model: headCount ${heads} must be a multiple of headCountKv ${headsKv}`,
    );
  }
  const headDim = embd / heads;
  const embdKv = headDim * headsKv;
  const vocab = byteVocab();
  const nVocab = vocab.tokens.length;

  const random = seededRandom(seed);
  function weights(name: string, dims: number[]): GgufTensor {
    const data = new Float32Array(dims.reduce((a, b) => a * b, 1));
    for (let i = 0; i < data.length; i++) {
      data[i] = (random() * 2 - 1) * scale;
    }
    return { name, dims, data };
  }
  function norm(name: string): GgufTensor {
    return { name, dims: [embd], data: new Float32Array(embd).fill(1) };
  }

  const tensors: GgufTensor[] = [weights("token_embd.weight", [embd, nVocab])];
  for (let b = 0; b < blocks; b++) {
    const p = `blk.${b}`;
    tensors.push(
      norm(`${p}.attn_norm.weight`),
      weights(`${p}.attn_q.weight`, [embd, embd]),
      weights(`${p}.attn_k.weight`, [embd, embdKv]),
      weights(`${p}.attn_v.weight`, [embd, embdKv]),
      weights(`${p}.attn_output.weight`, [embd, embd]),
      norm(`${p}.ffn_norm.weight`),
      weights(`${p}.ffn_gate.weight`, [embd, ff]),
      weights(`${p}.ffn_up.weight`, [embd, ff]),
      weights(`${p}.ffn_down.weight`, [ff, embd]),
    );
  }
  tensors.push(
    norm("output_norm.weight"),
    weights("output.weight", [embd, nVocab]),
  );

  return encodeGguf({
    metadata: {
      "general.architecture": str("llama"),
      "general.name": str(options.name ?? "mymodel-tiny-llama"),
      "general.file_type": u32(0), // LLAMA_FTYPE_ALL_F32
      "llama.context_length": u32(ctx),
      "llama.embedding_length": u32(embd),
      "llama.block_count": u32(blocks),
      "llama.feed_forward_length": u32(ff),
      "llama.attention.head_count": u32(heads),
      "llama.attention.head_count_kv": u32(headsKv),
      "llama.rope.dimension_count": u32(headDim),
      "llama.attention.layer_norm_rms_epsilon": f32(1e-5),
      "tokenizer.ggml.model": str("llama"),
      "tokenizer.ggml.tokens": array("string", vocab.tokens),
      "tokenizer.ggml.scores": array("f32", vocab.scores),
      "tokenizer.ggml.token_type": array("i32", vocab.tokenTypes),
      "tokenizer.ggml.bos_token_id": u32(1),
      "tokenizer.ggml.eos_token_id": u32(2),
      "tokenizer.ggml.unknown_token_id": u32(0),
      "tokenizer.ggml.padding_token_id": u32(3),
      "tokenizer.ggml.add_bos_token": bool(true),
      "tokenizer.ggml.add_eos_token": bool(false),
      "tokenizer.chat_template": str(
        options.chatTemplate ?? TINY_CHAT_TEMPLATE,
      ),
    },
    tensors,
  });
}
