/**
 * A launcher site on a stand-in GPU machine, for the tests that run the real
 * CLI over fake GPUs: a fresh root, the engines' executables and the
 * machine's `nvidia-smi` first on PATH, a catalogue file of the cards, a free
 * port block, and the launcher's arguments for them.
 *
 * ```ts ignore
 * await using s = await gpuSite({
 *   cards: { a: { engine: "llama.cpp" } },
 *   bin: ["llama-server"],
 *   devices: fakeDevices(2),
 *   gpus: "0-1",
 * });
 * const plan = JSON.parse(await s.dryRun(["a"]));
 * ```
 */
import assert from "node:assert/strict";
import {
  type FakeDevice,
  type FakeGpuMachine,
  fakeGpuMachine,
} from "./fake_gpus.ts";
import { catalogueText } from "./gpu_cards.ts";
import {
  fakeBin,
  freePorts,
  Launcher,
  makeRoot,
  pathWith,
  siteArgs,
} from "./helpers.ts";
import { vllmStandIn } from "./vllm_stand_in.ts";

const MOD = new URL("../../mod.ts", import.meta.url).pathname;

/** What {@linkcode gpuSite} makes. */
export interface GpuSiteOptions {
  /** The catalogue's `models:` mapping (see `catalogueText`). */
  cards: Record<string, Record<string, unknown>>;
  /**
   * The engines on PATH: stand-in engines by these names (`fakeBin`), or
   * `"vllm stand-in"` for the vLLM stand-in as `vllm`.
   */
  bin: string[] | "vllm stand-in";
  /** The fake GPU machine's devices. */
  devices: FakeDevice[];
  /** The launcher's `--gpus`. */
  gpus: string;
}

/** A site made by {@linkcode gpuSite}; dispose removes all it made. */
export interface GpuSite extends AsyncDisposable {
  root: string;
  /** The launcher's port; its engines' follow it. */
  port: number;
  machine: FakeGpuMachine;
  /** The CLI for `names`, its environment with `more` on top. */
  start(names: string[], more?: Record<string, string>): Launcher;
  /** `--dry-run` (JSON unless `json` is false): its stdout, or its stderr when it exits `code`. */
  dryRun(names: string[], json?: boolean, code?: number): Promise<string>;
}

/**
 * Makes the site: the launcher runs with `--gpus`, a 0.3 s health interval,
 * dev mode and no engine API key, on a block of 4 free ports.
 */
export async function gpuSite(options: GpuSiteOptions): Promise<GpuSite> {
  const root = await makeRoot();
  const engines = options.bin === "vllm stand-in"
    ? await vllmStandIn()
    : ownedDir(await fakeBin(options.bin));
  const machine = await fakeGpuMachine({ devices: options.devices });
  const file = `${root}/cards.yaml`;
  await Deno.writeTextFile(file, catalogueText(options.cards));
  const port = freePorts(4);
  const env = {
    PATH: pathWith(`${engines.dir}:${machine.bin}`),
    FAKE_GPU_LEDGER: machine.ledger,
    NUCLEUS_MODE: "dev",
    LOCAL_ENGINE_API_KEY: "",
  };
  const args = [
    ...siteArgs(port, root, file),
    "--gpus",
    options.gpus,
    "--health-interval",
    "0.3",
  ];
  return {
    root,
    port,
    machine,
    start: (names, more = {}) =>
      new Launcher([...names, ...args], { ...env, ...more }),
    async dryRun(names, json = true, code = 0) {
      const out = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", "--quiet", MOD, ...names, ...args, "--dry-run"]
          .concat(json ? ["--json"] : []),
        env: { NO_COLOR: "1", ...env },
        stdin: "null",
      }).output();
      const text = new TextDecoder();
      assert.equal(out.code, code, text.decode(out.stderr));
      return text.decode(code === 0 ? out.stdout : out.stderr);
    },
    async [Symbol.asyncDispose]() {
      await machine[Symbol.asyncDispose]();
      await engines[Symbol.asyncDispose]();
      await Deno.remove(root, { recursive: true }).catch(() => {});
    },
  };
}

/** `dir`, removed on dispose. */
function ownedDir(dir: string): { dir: string } & AsyncDisposable {
  return {
    dir,
    async [Symbol.asyncDispose]() {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    },
  };
}
