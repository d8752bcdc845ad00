/**
 * The setup the llama-server tests share: the cached build
 * (`deno task engine:llama`) or a failure saying how to build it, so none of
 * them passes silently, and a fresh root holding the project's tiny model.
 */
import { dirname } from "node:path";
import {
  isLlamaServerBuilt,
  llamaServerPath,
} from "../../tools/llama_server.ts";
import { writeTinyModel } from "../../tools/tiny_model.ts";
import { makeRoot, pathWith } from "./helpers.ts";

/** The cached `llama-server` binary, or a failure saying how to build it. */
export function llamaServer(): string {
  if (!isLlamaServerBuilt()) {
    throw new Error(
      `Cannot run the llama-server tests: no finished build at ${llamaServerPath()} (run deno task engine:llama first)`,
    );
  }
  return llamaServerPath();
}

/**
 * A fresh root with the tiny model at `model`
 * (`<root>/models/tiny-llama/tiny-llama.gguf`, the `tiny-llama` local of the
 * fixtures), `server` the cached binary and `path` a PATH with its directory
 * first. Fails before making anything when there is no build.
 */
export async function llamaRoot(): Promise<
  { root: string; model: string; server: string; path: string }
> {
  const server = llamaServer();
  const root = await makeRoot();
  const model = `${root}/models/tiny-llama/tiny-llama.gguf`;
  await writeTinyModel(model);
  return { root, model, server, path: pathWith(dirname(server)) };
}
