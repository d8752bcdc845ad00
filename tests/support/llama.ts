/**
 * The setup the llama-server tests share: the cached build
 * (`deno task engine:llama`) or a failure saying how to build it, so none of
 * them passes silently, a fresh root holding the project's tiny model, and
 * the CLI over them.
 */
import { dirname } from "node:path";
import {
  isLlamaServerBuilt,
  llamaServerPath,
} from "../../tools/llama_server.ts";
import { writeTinyModel } from "../../tools/tiny_model.ts";
import {
  freePorts,
  Launcher,
  makeRoot,
  pathWith,
  siteArgs,
  waitFor,
} from "./helpers.ts";

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

/**
 * The CLI over the real llama-server on a fresh {@linkcode llamaRoot}: cards
 * `names` of `catalogue` (its text, written to `<root>/catalogue.yaml`) on a
 * free port block, in dev mode with `flags`, none of this process's
 * `MY_LOCAL` and `NUCLEUS_*`, and `key` as the engines' API key.
 */
export async function llamaLauncher(
  names: string[],
  catalogue: string,
  flags: string[],
  key: string,
): Promise<{ root: string; model: string; port: number; launcher: Launcher }> {
  const { root, path, model } = await llamaRoot();
  const file = `${root}/catalogue.yaml`;
  await Deno.writeTextFile(file, catalogue);
  const port = freePorts(names.length + 1);
  const launcher = new Launcher([
    ...names,
    ...siteArgs(port, root, file),
    "--dev_mode",
    ...flags,
  ], {
    PATH: path,
    MY_LOCAL: "",
    NUCLEUS_HOST: "",
    NUCLEUS_PORT: "",
    LOCAL_ENGINE_API_KEY: key,
  });
  return { root, model, port, launcher };
}

/**
 * Until `detail()` (an engine's `/models?detail=1` entry) says `sleeping`:
 * 60 s at most, for its first load and its idle seconds.
 */
export async function untilSleeping(
  detail: () => Promise<{ state?: string }>,
): Promise<void> {
  await waitFor(
    async () => (await detail()).state === "sleeping",
    "sleeping",
    60_000,
  );
}
