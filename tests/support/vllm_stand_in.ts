/**
 * The vLLM stand-in (tests/fixtures/vllm_stand_in.ts) as an executable, for
 * a card's `executable:` or a PATH entry named `vllm`: a vLLM card's argv
 * (`<executable> serve MODEL --host H --port P --served-model-name NAME …`)
 * runs it with the current Deno.
 *
 * ```ts ignore
 * await using vllm = await vllmStandIn();
 * const card = `m: { verb: chat, hub: org/m, executable: ${vllm.executable},
 *   args: [--enable-sleep-mode, --enable-server-load-tracking, --fake-awake-mib, "20000"] }`;
 * // the launcher's environment: VLLM_SERVER_DEV_MODE=1, and a fake GPU machine's env
 * ```
 */

const STAND_IN =
  new URL("../fixtures/vllm_stand_in.ts", import.meta.url).pathname;

/** A temp folder holding `vllm`, the stand-in's wrapper; removed on dispose. */
export interface VllmStandIn extends AsyncDisposable {
  /** The wrapper's path: a card's `executable`. */
  readonly executable: string;
  /** Its folder: put it first on PATH to answer for `vllm`. */
  readonly dir: string;
}

/**
 * Writes the wrapper `<temp>/vllm` running the stand-in with the current
 * Deno binary (so it works where Deno itself is not on PATH).
 *
 * @returns The wrapper; `await using` removes it.
 */
export async function vllmStandIn(): Promise<VllmStandIn> {
  const dir = await Deno.makeTempDir({ prefix: "serve-vllm-" });
  const executable = `${dir}/vllm`;
  await Deno.writeTextFile(
    executable,
    `#!/bin/sh\nexec '${Deno.execPath()}' run -A --quiet '${STAND_IN}' "$@"\n`,
    { mode: 0o755 },
  );
  return {
    executable,
    dir,
    async [Symbol.asyncDispose]() {
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** The stand-in's script, for tests that spawn it themselves. */
export const VLLM_STAND_IN: string = STAND_IN;

/**
 * The argv a vLLM card's engine starts with, `serve MODEL --host 127.0.0.1
 * --port PORT --served-model-name m`: for the stand-in, or any engine taking
 * vLLM's flags, spawned by a test itself.
 */
export function vllmServeArgs(port: number, model = "org/m"): string[] {
  return [
    "serve",
    model,
    "--host",
    "127.0.0.1",
    "--port",
    String(port),
    "--served-model-name",
    "m",
  ];
}
