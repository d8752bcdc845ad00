/**
 * `deno task compile`: builds the launcher as one executable with `deno
 * compile`, the narrowed permission flags baked in, the shipped catalogue
 * embedded (`--include catalogue/`).
 *
 * ```sh
 * MY_LOCAL=/srv/mymodel deno task compile            # -> dist/mymodel-serve
 * deno task compile --root /srv/mymodel --output /usr/local/bin/mymodel-serve
 * ```
 *
 * A compiled binary cannot be given other permissions when it runs, so the
 * root directory (read and write) and the credential directories (read) are
 * fixed here. `deno compile` downloads its runtime (`denort`) the first time;
 * where that download is impossible the task fails with one line saying so.
 *
 * @module
 */
import { parseArgs } from "node:util";

/** The programs the launcher runs: engines, `kill` for process groups, `sh` for the
 * watchdog, `nvidia-smi` for GPU detection, `prlimit` for the file limit. */
export const ALLOW_RUN = "vllm,llama-server,python3,kill,sh,nvidia-smi,prlimit";

/**
 * V8's young generation capped at 2 MiB semi-spaces: the `/models` polls
 * otherwise grow the heap to ~65 MiB and keep it (the bench's memory rows);
 * throughput stays within noise.
 */
export const V8_FLAGS = "--max-semi-space-size=2";

/** Where a secret file may be: systemd's `LoadCredential=` and the Kubernetes mount. */
export const CREDENTIAL_DIRS = ["/run/credentials", "/etc/mymodel/secrets"];

/** What {@linkcode compileArgs} builds the command line from. */
export interface CompileOptions {
  /** The root directory (`MY_LOCAL`): read and written. */
  root: string;
  /** The executable to write. */
  output: string;
  /** The compile target, when not the host's. */
  target?: string;
}

/**
 * The `deno` arguments that build the binary.
 *
 * @param options Root directory, output path and target.
 * @returns The arguments after `deno`.
 */
export function compileArgs(options: CompileOptions): string[] {
  return [
    "compile",
    `--v8-flags=${V8_FLAGS}`,
    "--allow-net",
    "--allow-env",
    `--allow-run=${ALLOW_RUN}`,
    `--allow-read=${[options.root, ...CREDENTIAL_DIRS].join(",")}`,
    `--allow-write=${options.root}`,
    "--include",
    "catalogue/",
    ...(options.target ? ["--target", options.target] : []),
    "--output",
    options.output,
    "mod.ts",
  ];
}

/**
 * One line explaining a failed `deno compile`, from its stderr: a runtime that
 * could not be downloaded gets the reason and the way around it.
 *
 * @param stderr What `deno compile` printed.
 * @returns The line to print.
 */
export function explainFailure(stderr: string): string {
  const text = stderr; // uncoloured: main() runs deno compile with NO_COLOR
  const download = /(https?:\/\/\S*denort\S*\.zip)/.exec(text);
  if (download || /Setting up base binary/.test(text)) {
    const url = download?.[1] ?? "the denort runtime";
    return `Cannot compile: deno compile could not download its runtime (${url}) from this machine (expected network access to it, or DENORT_BIN set to a denort binary of Deno ${Deno.version.deno})`;
  }
  const last = text.trim().split("\n").filter((l) => /error/i.test(l)).at(0) ??
    text.trim().split("\n").at(-1) ?? "no output";
  return `Cannot compile: ${last.replace(/^error:\s*/i, "").trim()}`;
}

async function main(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      root: { type: "string" },
      output: { type: "string" },
      target: { type: "string" },
    },
  });
  const root = values.root ?? Deno.env.get("MY_LOCAL") ?? "/srv/mymodel";
  const output = values.output ?? "dist/mymodel-serve";
  const options: CompileOptions = { root, output };
  if (values.target) options.target = values.target;
  const repo = new URL("../", import.meta.url);
  const { code, stderr } = await new Deno.Command(Deno.execPath(), {
    args: compileArgs(options),
    cwd: repo,
    env: { NO_COLOR: "1" },
    stdout: "inherit",
    stderr: "piped",
  }).output();
  if (code === 0) {
    console.log(`compiled ${output} (root ${root})`);
    return 0;
  }
  console.error(explainFailure(new TextDecoder().decode(stderr)));
  return 1;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
