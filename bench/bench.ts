/**
 * `deno task bench`: measures the launcher on loopback against baselines
 * started in the same run, with `wrk` as the load generator and the stand-in
 * engine (`tests/fixtures/fake_engine.ts`) behind every model. Phases:
 *
 * - load (`phases/load.ts`): `/health` against a bare `Deno.serve` answering
 *   the same JSON (and a second one as the noise control); `/models` with 1, 8
 *   and 32 engines against a bare fan-out server polling the same engines; a
 *   hung engine; RSS idle and after load, also of 1-engine launchers with a
 *   smaller V8 young generation (`--v8-flags=--max-semi-space-size=2`, `=1`);
 * - start (`phases/start.ts`): spawn → "listening on", → first answer, and
 *   SIGTERM → exit, with 1 and 32 stand-in engines and with sleep-like ones;
 * - production mode (`phases/auth.ts`): production ÷ development `/health`,
 *   every request's token verified; the security headers' cost;
 * - connection guard (`phases/guard.ts`): guarded ÷ bare `/health`, and the
 *   launcher's `/health` with 1,000 idle connections held ÷ without;
 * - engine logs (`phases/log.ts`): an engine writing 200 MB to stdout
 *   through the launcher into its log ÷ straight to a file (and through a
 *   plain pipe to `cat`), and whether the log holds every byte;
 * - GPU lifecycle (`phases/gpu.ts`): 32 engines with no GPU pool, this tree
 *   ÷ the tree before the GPU start gate (exported by `git archive`) against
 *   an A/A control; `nvidia-smi` queries and launcher CPU per health round
 *   with the stand-in `nvidia-smi` and 8 (or 2) engines on fake GPUs;
 * - one engine (`phases/pipeline.ts`): the same comparison against the
 *   tree before the one-engine work: start times, CPU, idle RSS, /models;
 * - catalogue (`phases/catalogue.ts`): `Registry.load` of 5,000 generated
 *   cards, with and without an alias each, and of 10,000 with aliases;
 * - reload (`phases/reload.ts`): `/health` polled every 10 ms while a
 *   launcher reloads the shipped catalogue and 1,000 cards.
 *
 * Prints a Markdown table on stdout (progress goes to stderr) and writes the
 * same text to `bench/results/latest.md`. Every row has its absolute value and
 * its ratio to a baseline measured in the same run; a "Targets" section says
 * pass or fail. With `--strict` a failed target makes the exit code 1.
 *
 * Needs `wrk` (`apt-get install wrk`). Takes about seven minutes on two cores;
 * `--auth-only` runs the production-mode rows alone (about 30 s, written to
 * `bench/results/auth.md`), `--only=guard` the guard rows (about 45 s),
 * `--only=log` the log rows (a few seconds) and `--only=gpu` the GPU
 * lifecycle rows (about 90 s), `--only=dryrun` the `--dry-run` rows (about
 * 15 s), `--only=pipeline` the one-engine rows (about 90 s),
 * `--only=catalogue` the catalogue rows (about 20 s), all printed only;
 * `--only=serving` the serving-signal rows (issue 36, about 6 min, written to
 * `bench/results/serving.md`); `--only=reload` the reload rows (about 10 s,
 * written to `bench/results/reload.md`); `--only=drain` streams through a
 * reload and a stop with and without the drain (about 30 s, written to
 * `bench/results/drain.md`); `--only=residency` the first token of the real
 * llama-server awake, asleep (`sleep_after`) and from a cold start, on CPU
 * (about 40 s, needs `deno task engine:llama` but not `wrk`, written to
 * `bench/results/residency.md`); `--only=residency-vllm` the launcher-woken
 * half there: three vLLM stand-in cards at 1.25× one stand-in GPU, 100
 * alternating requests from two clients, switch seconds against the engine's
 * own wake (about 2 min, no `wrk`, its section of the same file).
 *
 * @module
 */
import { fakeBin } from "../tests/support/helpers.ts";
import { Child } from "./servers/process.ts";
import { writeWrkScript, WrkMissingError, wrkVersion } from "./load/wrk.ts";
import { type Bench, progress, removeDir } from "./plan.ts";
import { catalogueYaml } from "./servers/spawn.ts";
import { loadPhase } from "./phases/load.ts";
import { startPhase } from "./phases/start.ts";
import { authPhase } from "./phases/auth.ts";
import { guardPhase } from "./phases/guard.ts";
import { logPhase } from "./phases/log.ts";
import { journalPhase } from "./phases/journal.ts";
import { gpuPhase } from "./phases/gpu.ts";
import { dryRunPhase } from "./phases/dry_run.ts";
import { pipelinePhase } from "./phases/pipeline.ts";
import { servingPhase } from "./phases/serving.ts";
import { cataloguePhase } from "./phases/catalogue.ts";
import { reloadPhase } from "./phases/reload.ts";
import { drainPhase } from "./phases/drain.ts";
import { residencyPhase } from "./phases/residency.ts";
import { residencyVllmPhase } from "./phases/residency_vllm.ts";
import {
  authReport,
  buildReport,
  catalogueReport,
  drainReport,
  dryRunReport,
  gpuReport,
  guardReport,
  journalReport,
  logReport,
  pipelineReport,
  reloadReport,
  type Report,
  RESIDENCY_VLLM_HEADING,
  residencyReport,
  residencyVllmReport,
  servingReport,
  withSection,
} from "./report/report.ts";

const RESULTS = new URL("./results/latest.md", import.meta.url);
const AUTH_RESULTS = new URL("./results/auth.md", import.meta.url);
const RELOAD_RESULTS = new URL("./results/reload.md", import.meta.url);
const SERVING_RESULTS = new URL("./results/serving.md", import.meta.url);
const DRAIN_RESULTS = new URL("./results/drain.md", import.meta.url);
const RESIDENCY_RESULTS = new URL("./results/residency.md", import.meta.url);

/** A PATH directory whose `vllm` sleeps: an engine that costs no CPU and never answers. */
async function sleepBin(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "serve-bench-sleep-" });
  await Deno.writeTextFile(`${dir}/vllm`, "#!/bin/sh\nexec sleep 600\n", {
    mode: 0o755,
  });
  return dir;
}

async function write(url: URL, report: Report): Promise<void> {
  await Deno.mkdir(new URL(".", url), { recursive: true });
  await Deno.writeTextFile(url, report.markdown);
  progress(`wrote ${url.pathname}`);
}

/** The results file's section under `heading` (to the next one), or undefined. */
async function sectionOf(
  url: URL,
  heading: string,
): Promise<string | undefined> {
  const text = await Deno.readTextFile(url).catch(() => "");
  const at = text.indexOf(`${heading}\n`);
  if (at < 0) return undefined;
  const next = text.indexOf("\n## ", at + heading.length);
  return next < 0 ? text.slice(at) : text.slice(at, next + 1);
}

/** A phase measured alone and its report. */
type OnePhase = (bench: Bench) => Promise<Report>;

/** The flags that measure one phase alone, in the order they win when several are given. */
const ONE_PHASE: Readonly<Record<string, OnePhase>> = {
  "--auth-only": async (bench) => {
    const report = authReport(await authPhase(bench));
    await write(AUTH_RESULTS, report);
    return report;
  },
  "--only=guard": async (bench) => guardReport(await guardPhase(bench)),
  "--only=log": async (bench) => logReport(await logPhase(bench)),
  "--only=journal": async (bench) => journalReport(await journalPhase(bench)),
  "--only=gpu": async (bench) => gpuReport(await gpuPhase(bench)),
  "--only=dryrun": async (bench) => dryRunReport(await dryRunPhase(bench)),
  "--only=pipeline": async (bench) =>
    pipelineReport(await pipelinePhase(bench)),
  "--only=serving": async (bench) => {
    const report = servingReport(await servingPhase(bench));
    await write(SERVING_RESULTS, report);
    return report;
  },
  "--only=catalogue": async (bench) =>
    catalogueReport(await cataloguePhase(bench)),
  "--only=drain": async (bench) => {
    const report = drainReport(await drainPhase(bench));
    await write(DRAIN_RESULTS, report);
    return report;
  },
  "--only=reload": async (bench) => {
    const report = reloadReport(await reloadPhase(bench));
    await write(RELOAD_RESULTS, report);
    return report;
  },
  // Each residency half rewrites its own section and keeps the other's.
  "--only=residency": async (bench) => {
    const report = residencyReport(await residencyPhase(bench));
    const vllm = await sectionOf(RESIDENCY_RESULTS, RESIDENCY_VLLM_HEADING);
    const markdown = vllm === undefined
      ? report.markdown
      : withSection(report.markdown, RESIDENCY_VLLM_HEADING, vllm);
    await write(RESIDENCY_RESULTS, { ...report, markdown });
    return report;
  },
  "--only=residency-vllm": async (bench) => {
    const report = residencyVllmReport(await residencyVllmPhase(bench));
    const text = await Deno.readTextFile(RESIDENCY_RESULTS).catch(() => "");
    const markdown = withSection(text, RESIDENCY_VLLM_HEADING, report.markdown);
    await write(RESIDENCY_RESULTS, { ...report, markdown });
    return report;
  },
};

/** Rows that send no load with `wrk`: they run where it is not installed. */
const WITHOUT_WRK: ReadonlySet<string> = new Set([
  "--only=residency",
  "--only=residency-vllm",
]);

/** Every phase, or `only` alone. */
async function measure(
  bench: Bench,
  only: OnePhase | undefined,
): Promise<Report> {
  if (only) return await only(bench);
  const wrk = await wrkVersion();
  const started = performance.now();
  const loadBefore = Deno.loadavg()[0] ?? Number.NaN;
  const load = await loadPhase(bench);
  const start = await startPhase(bench);
  const auth = await authPhase(bench);
  const guard = await guardPhase(bench);
  const log = await logPhase(bench);
  const journal = await journalPhase(bench);
  const gpu = await gpuPhase(bench);
  const dryRun = await dryRunPhase(bench);
  const pipeline = await pipelinePhase(bench);
  const catalogue = await cataloguePhase(bench);
  const reload = await reloadPhase(bench);
  const report = buildReport({
    load,
    start,
    auth,
    guard,
    log,
    journal,
    gpu,
    dryRun,
    pipeline,
    catalogue,
    reload,
  }, {
    wrk: wrk.replace(/ Copyright.*$/, ""),
    loadBefore,
    loadAfter: Deno.loadavg()[0] ?? Number.NaN,
    seconds: (performance.now() - started) / 1000,
  });
  await write(RESULTS, report);
  return report;
}

async function run(
  strict: boolean,
  flag: string | undefined,
): Promise<number> {
  if (!flag || !WITHOUT_WRK.has(flag)) await wrkVersion();
  const only = flag === undefined ? undefined : ONE_PHASE[flag];
  await using stack = new AsyncDisposableStack();
  const controller = new AbortController();
  const work = await Deno.makeTempDir({ prefix: "serve-bench-" });
  stack.defer(() => removeDir(work));
  const bin = await fakeBin(["vllm"]);
  stack.defer(() => removeDir(bin));
  const sleeping = await sleepBin();
  stack.defer(() => removeDir(sleeping));
  const client = Deno.createHttpClient({ poolMaxIdlePerHost: 0 });
  stack.defer(() => client.close());
  // Ctrl-C or SIGTERM: stop whatever runs (launchers stop their engines), then clean up.
  function onSignal(): void {
    progress("interrupted: stopping every process");
    controller.abort();
    Child.stopAll()
      .finally(() =>
        Promise.all([removeDir(work), removeDir(bin), removeDir(sleeping)])
      )
      .finally(() => Deno.exit(130));
  }
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    Deno.addSignalListener(signal, onSignal);
    stack.defer(() => Deno.removeSignalListener(signal, onSignal));
  }
  const catalogue = `${work}/catalogue.yaml`;
  await Deno.writeTextFile(catalogue, catalogueYaml());
  const bench: Bench = {
    work,
    bin,
    sleepBin: sleeping,
    catalogue,
    script: await writeWrkScript(work),
    signal: controller.signal,
    client,
  };
  const report = await measure(bench, only);
  console.log(report.markdown);
  return strict && report.targets.some((t) => !t.pass) ? 1 : 0;
}

/**
 * Runs the benchmark.
 *
 * @param args `--strict` makes a failed target exit with code 1;
 * `--auth-only` runs only the production-mode rows (about 30 s);
 * `--only=guard` measures only the connection guard (about 45 s);
 * `--only=log` measures only the engine logs (a few seconds);
 * `--only=journal` measures only the journal's cost to a restart storm
 * (about 25 s);
 * `--only=gpu` measures only the GPU lifecycle (about 90 s);
 * `--only=dryrun` measures only `--dry-run` (about 15 s);
 * `--only=pipeline` measures only this tree against the tree before the
 * one-engine work (about 90 s); `--only=catalogue` measures only catalogue
 * loading (about 20 s); `--only=reload` measures only `/health` during
 * reloads of 5,000 cards (about 10 s); `--only=drain` measures only
 * streams through a reload and a stop, with and without the drain (about 30 s);
 * `--only=residency` measures only the real llama-server's first token awake,
 * asleep and from a cold start (about 40 s); `--only=residency-vllm` only the
 * launcher-woken switches of three vLLM stand-in cards (about 2 min).
 * @returns The exit code.
 */
export async function main(
  args: readonly string[] = Deno.args,
): Promise<number> {
  const flags = ["--strict", ...Object.keys(ONE_PHASE)];
  const unknown = args.filter((a) => !flags.includes(a));
  if (unknown.length > 0) {
    console.error(
      `Cannot use ${unknown.join(" ")}: expected ${flags.join(", ")}`,
    );
    return 2;
  }
  try {
    const only = Object.keys(ONE_PHASE).find((flag) => args.includes(flag));
    return await run(args.includes("--strict"), only);
  } catch (error) {
    if (error instanceof WrkMissingError) {
      console.error(error.message);
      return 1;
    }
    console.error(
      `bench failed: ${error instanceof Error ? error.message : String(error)}`,
    );
    return 1;
  }
}

if (import.meta.main) {
  Deno.exit(await main());
}
