/**
 * Restart-to-ready of the real llama-server, cold against read-ahead: a GGUF
 * of about `--gib` GiB written by tools/gguf.ts, served by the launcher; each
 * run SIGKILLs the engine, evicts the file's pages (`vmtouch -e`) once the
 * process is gone, and times until the engine's `/health` answers 200 again.
 * Modes alternate (cold first on even runs), one launcher per measurement.
 * By hand, not in the unit suite:
 *
 * ```sh
 * deno run -A bench/recovery.ts [--runs 3] [--gib 1.5]
 * ```
 *
 * @module
 */
import { dirname } from "node:path";
import { parseArgs } from "node:util";
import { tinyLlama } from "../tools/gguf.ts";
import { writeFileAtomic } from "../tools/tiny_model.ts";
import { llamaServerPath } from "../tools/llama_server.ts";
import { freePorts, makeRoot, pathWith } from "../tests/support/helpers.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: { runs: { type: "string" }, gib: { type: "string" } },
});
const RUNS = Number(values.runs ?? 3);
const GIB = Number(values.gib ?? 1.5);
const MOD = new URL("../mod.ts", import.meta.url).pathname;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// One block of 2048 wide, feed-forward 5632, is 206 MB of f32.
const BLOCK = 4 * (4 * 2048 * 2048 + 3 * 2048 * 5632);
const root = await makeRoot();
const model = `${root}/models/big.gguf`;
await writeFileAtomic(
  model,
  tinyLlama({
    embeddingLength: 2048,
    headCount: 16,
    headCountKv: 16,
    feedForwardLength: 5632,
    blockCount: Math.max(1, Math.round((GIB * 2 ** 30) / BLOCK)),
    contextLength: 256,
  }),
);
const size = Deno.statSync(model).size;

async function health(port: number): Promise<boolean> {
  try {
    const r = await fetch(`http://127.0.0.1:${port}/health`);
    await r.body?.cancel();
    return r.status === 200;
  } catch {
    return false;
  }
}

async function until(test: () => Promise<boolean> | boolean, what: string) {
  const end = Date.now() + 300_000;
  while (!(await test())) {
    if (Date.now() > end) throw new Error(`bench/recovery: no ${what}`);
    await sleep(20);
  }
}

const gone = (pid: number) => {
  try {
    Deno.kill(pid, "SIGCONT");
    return false;
  } catch {
    return true;
  }
};

/** One launcher: its engine ready, killed, evicted, timed back to 200. */
type Mode = "cold" | "read-ahead" | "warm";
async function measure(mode: Mode): Promise<number> {
  const readAhead = mode === "read-ahead";
  const catalogue = `${root}/catalogue.yaml`;
  await Deno.writeTextFile(
    catalogue,
    `models:\n  big:\n    verb: chat\n    local: big.gguf\n    engine: llama.cpp\n` +
      `    read_ahead: ${readAhead}\n` +
      `    args: { ctx-size: 256, parallel: 1, threads: 2 }\n`,
  );
  const port = freePorts(2);
  const launcher = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", MOD, "big", "--host", "127.0.0.1", "--port"]
      .concat([String(port), "--directory", root, "--catalogue", catalogue]),
    env: {
      PATH: pathWith(dirname(llamaServerPath())),
      NUCLEUS_MODE: "dev",
    },
    stdout: "null",
    stderr: "null",
  }).spawn();
  try {
    await until(() => health(port + 1), "first 200");
    const detail = await (await fetch(
      `http://127.0.0.1:${port}/models?detail=1`,
    )).json();
    const pid: number = detail.active.big.pid;
    const began = performance.now();
    Deno.kill(pid, "SIGKILL");
    await until(() => gone(pid), "exit");
    // The pages unmapped with the process: now they can be evicted.
    if (mode !== "warm") {
      await new Deno.Command("vmtouch", { args: ["-qe", model] }).output();
    }
    await until(async () => await health(port + 1), "200 after the restart");
    return (performance.now() - began) / 1000;
  } finally {
    launcher.kill("SIGTERM");
    await launcher.status;
  }
}

const times: Record<Mode, number[]> = { cold: [], "read-ahead": [], warm: [] };
const MODES: Mode[] = ["cold", "read-ahead", "warm"];
for (let run = 0; run < RUNS; run++) {
  // Alternated: cold first, then read-ahead first; warm (no eviction) last.
  const order: Mode[] = run % 2 ? ["read-ahead", "cold", "warm"] : MODES;
  for (const mode of order) {
    const seconds = await measure(mode);
    times[mode].push(seconds);
    console.error(`run ${run + 1} ${mode}: ${seconds.toFixed(2)} s`);
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
const log = await Deno.readTextFile(`${root}/logs/big.log`);
console.log(`model ${(size / 2 ** 30).toFixed(2)} GiB; runs ${RUNS}`);
for (const mode of MODES) {
  const xs = times[mode];
  const all = xs.map((s) => s.toFixed(2)).join(" ");
  console.log(`${mode}: ${all}; median ${median(xs).toFixed(2)} s`);
}
const ratio = median(times["read-ahead"]) / median(times.cold);
console.log(`read-ahead / cold (medians): ${ratio.toFixed(2)}`);
console.log(log.split("\n").filter((l) => /read-ahead/.test(l)).join("\n"));
await Deno.remove(root, { recursive: true });
