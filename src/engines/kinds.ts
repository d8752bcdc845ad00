/**
 * Engine kinds: how each inference engine is started. One entry a kind; adding a
 * kind is one more entry in {@linkcode ENGINE_KINDS}.
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";
import type { EngineName } from "../catalogue/engine_names.ts";

/** What an engine's command line is built from. */
export interface EngineContext {
  /** Absolute local path of the weights, or the hub id. */
  readonly model: string;
  /** True when `model` is a local path. */
  readonly isLocal: boolean;
  readonly host: string;
  readonly port: number;
  /** The catalogue name, served as the model name. */
  readonly name: string;
  /** The API key the engine must demand; empty for none. */
  readonly apiKey: string;
  readonly card: ModelCard;
}

/** One kind of inference engine. */
export interface EngineKind {
  /** The executable looked up on PATH unless the card names one. */
  readonly executable: string;
  /** How to install the executable, for the error when it is missing. */
  readonly install: string;
  /** The arguments after the executable, the card's `args` last. */
  argv(ctx: EngineContext): string[];
  /** Chooses the file to serve from a local directory (llama.cpp wants one GGUF file). */
  localFile?(dir: string): string;
}

function apiKeyArgs(apiKey: string): string[] {
  return apiKey ? ["--api-key", apiKey] : [];
}

/** `--host`, `--port`, the served-name flag, `--api-key`, then the card's args. */
function standardFlags(ctx: EngineContext, nameFlag: string): string[] {
  return [
    "--host",
    ctx.host,
    "--port",
    String(ctx.port),
    nameFlag,
    ctx.name,
    ...apiKeyArgs(ctx.apiKey),
    ...ctx.card.args,
  ];
}

/** Picks the GGUF file in a directory: the only one, or the first shard of a split model. */
function singleGguf(dir: string): string {
  const files: string[] = [];
  for (const entry of Deno.readDirSync(dir)) {
    if (entry.isFile && entry.name.endsWith(".gguf")) files.push(entry.name);
  }
  files.sort();
  const shards = files.filter((f) => /-00001-of-\d{5}\.gguf$/.test(f));
  if (files.length === 1) return `${dir}/${files[0]}`;
  if (
    shards.length === 1 && files.every((f) => /-\d{5}-of-\d{5}\.gguf$/.test(f))
  ) {
    return `${dir}/${shards[0]}`;
  }
  throw new Error(
    files.length === 0
      ? `Cannot choose a model file: ${dir} holds no .gguf file`
      : `Cannot choose a model file: ${dir} holds ${files.length} .gguf files (${
        files.join(", ")
      }); set the card's local to one of them`,
  );
}

const PLACEHOLDER = /\{(model|host|port|name|api_key)\}/g;

/** The `command` kind: the card's own argv template. */
function templateArgv(ctx: EngineContext): string[] {
  const values: Record<string, string> = {
    model: ctx.model,
    host: ctx.host,
    port: String(ctx.port),
    name: ctx.name,
    api_key: ctx.apiKey,
  };
  const template = (ctx.card.command ?? []).slice(1);
  const out: string[] = [];
  for (const part of template) {
    // Without a key, an argument that carries it is dropped, and so is the flag just before it.
    if (!ctx.apiKey && part.includes("{api_key}")) {
      if (part === "{api_key}" && out.at(-1)?.startsWith("-")) out.pop();
      continue;
    }
    out.push(
      part.replace(
        PLACEHOLDER,
        (_match: string, key: string) => values[key] ?? "",
      ),
    );
  }
  return [...out, ...ctx.card.args];
}

/** Every engine kind the catalogue accepts, by the name a card's `engine` field uses. */
export const ENGINE_KINDS: Readonly<Record<string, EngineKind>> = {
  vllm: {
    executable: "vllm",
    install: "pip install vllm",
    argv(ctx) {
      return ["serve", ctx.model, ...standardFlags(ctx, "--served-model-name")];
    },
  },
  "llama.cpp": {
    executable: "llama-server",
    install:
      "deno task engine:llama builds it and its --print-path says where: put that directory on PATH; or use a llama.cpp release",
    argv(ctx) {
      return [
        ctx.isLocal ? "-m" : "-hf",
        ctx.model,
        ...standardFlags(ctx, "--alias"),
      ];
    },
    localFile: singleGguf,
  },
  sglang: {
    executable: "python3",
    install: "pip install 'sglang[all]'",
    argv(ctx) {
      return [
        "-m",
        "sglang.launch_server",
        "--model-path",
        ctx.model,
        ...standardFlags(ctx, "--served-model-name"),
      ];
    },
  },
  command: {
    executable: "",
    install: "install the program the card's command names",
    argv: templateArgv,
  },
} satisfies Record<EngineName, EngineKind>;

// The table must cover exactly these names (checked by `satisfies` above).
export { ENGINE_NAMES } from "../catalogue/engine_names.ts";
