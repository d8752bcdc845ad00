/**
 * The Markdown `deno task bench` prints and writes: the full report (every
 * phase's rows, then the Targets section) and the one-phase reports of
 * `--auth-only`, `--only=guard`, `--only=log`, `--only=gpu`,
 * `--only=journal`, `--only=dryrun`, `--only=pipeline`, `--only=catalogue`,
 * `--only=reload` and `--only=residency`.
 *
 * @module
 */
import type { LoadResults } from "../phases/load.ts";
import type { StartResults } from "../phases/start.ts";
import type { AuthResults } from "../phases/auth.ts";
import { type GuardResults, IDLE_FLOOD } from "../phases/guard.ts";
import type { LogResults } from "../phases/log.ts";
import type { JournalResults } from "../phases/journal.ts";
import type { GpuResults } from "../phases/gpu.ts";
import {
  DRY_RUN_ENGINES,
  DRY_RUN_GPUS,
  type DryRunResults,
} from "../phases/dry_run.ts";
import {
  loadNotes,
  loadRows,
  loadTargets,
  memoryRows,
  memoryTargets,
} from "../rows/load.ts";
import { startRows, startTargets } from "../rows/start.ts";
import { authNotes, authRows, authTargets } from "../rows/auth.ts";
import { guardNotes, guardRows, guardTargets } from "../rows/guard.ts";
import { logRows, logTargets } from "../rows/log.ts";
import { journalRows, journalTargets } from "../rows/journal.ts";
import { GPU_METHOD, gpuNotes, gpuRows, gpuTargets } from "../rows/gpu.ts";
import { dryRunRows } from "../rows/dry_run.ts";
import type { PipelineResults } from "../phases/pipeline.ts";
import {
  PIPELINE_METHOD,
  pipelineNotes,
  pipelineRows,
  pipelineTargets,
} from "../rows/pipeline.ts";
import type { CatalogueResults } from "../phases/catalogue.ts";
import {
  CATALOGUE_METHOD,
  catalogueRows,
  catalogueTargets,
} from "../rows/catalogue.ts";
import type { ReloadResults } from "../phases/reload.ts";
import type { DrainResults } from "../phases/drain.ts";
import type { ServingResults } from "../phases/serving.ts";
import { SERVING_METHOD, servingNotes, servingRows } from "../rows/serving.ts";
import { DRAIN_METHOD, drainRows, drainTargets } from "../rows/drain.ts";
import { RELOAD_METHOD, reloadRows, reloadTargets } from "../rows/reload.ts";
import type { ResidencyResults } from "../phases/residency.ts";
import type { VllmResidencyResults } from "../phases/residency_vllm.ts";
import {
  residencyVllmMethod,
  residencyVllmNotes,
  residencyVllmRows,
  residencyVllmTargets,
} from "../rows/residency_vllm.ts";
import {
  residencyMethod,
  residencyNotes,
  residencyRows,
  residencyTargets,
} from "../rows/residency.ts";
import { HOST, MANY, PLAN } from "../plan.ts";
import { type Row, tableLines, type Verdict, verdictLines } from "./table.ts";

/** Every phase's results. */
export interface AllResults {
  load: LoadResults;
  start: StartResults;
  auth: AuthResults;
  guard: GuardResults;
  log: LogResults;
  journal: JournalResults;
  gpu: GpuResults;
  dryRun: DryRunResults;
  pipeline: PipelineResults;
  catalogue: CatalogueResults;
  reload: ReloadResults;
}

/** About the run, for the first line. */
export interface RunMeta {
  wrk: string;
  loadBefore: number;
  loadAfter: number;
  seconds: number;
}

/** A report and its verdicts (for `--strict`). */
export interface Report {
  markdown: string;
  targets: Verdict[];
}

const DRY_RUN_METHOD =
  `Dry run: each round times, order rotated, the launcher's --help, one stand-in nvidia-smi look (its two queries at once) and a dry run of ${DRY_RUN_ENGINES} engines on ${DRY_RUN_GPUS} fake GPUs; the ratio is the median of per-round ratios.`;

const METHOD = [
  `Loopback only (${HOST}); every engine is the stand-in \`tests/fixtures/fake_engine.ts\` (a Deno process) unless said otherwise.`,
  `Load: \`wrk -t1 -c1\` (c=1) or \`wrk -t2 -c8\` (c=8), ${PLAN.warmSeconds} s warm-up per target.`,
  `/health: ${PLAN.healthRounds} rounds of ${PLAN.healthSeconds} s over the bare server, a second bare server`,
  `(the noise control: it differs from the first only by chance) and the 1-engine launchers, order rotated each round.`,
  `/models: ${PLAN.modelsRounds} such rounds over launchers with 1, 8 and ${MANY} engines, all up at once,`,
  `and at c=1 over a bare fan-out server (\`bench/servers/fanout_server.ts\`) polling the same engines.`,
  `Two more 1-engine launchers run with \`--v8-flags=--max-semi-space-size=2\` and \`=1\` (a smaller V8 young generation)`,
  `and take the same /health and /models load as the default 1-engine launcher.`,
  `Values are medians over rounds; where baseline and target ran in the same rounds, ratio and Δ are the`,
  `medians of the per-round ratios and differences. Server CPU per request: user + system time of the`,
  `server process (all threads, engines excluded) during a run over the requests wrk completed;`,
  `steadier than throughput on a shared machine. Hung engine: one ${PLAN.hungSeconds} s run,`,
  `\`--timeout ${PLAN.hungTimeoutSeconds}s\`. Start: from the spawn of a fresh \`deno run -A\`;`,
  `SIGTERM → exit once every engine is healthy; "sleep-like" engines are a shell script \`exec sleep 600\``,
  `named \`vllm\` (no /health, no CPU), which leaves the launcher's own start-up cost.`,
  `RSS: VmRSS of the server process alone (engines excluded), idle (all engines healthy, before any load)`,
  `and after the load; the bare server's "after load" is after the /health load.`,
  `Guard: the bare server's handler behind the connection guard vs bare, ${PLAN.guardRounds} rotating rounds`,
  `of ${PLAN.guardSeconds} s at c=8; then the 1-engine launcher's /health alternately without and with`,
  `${IDLE_FLOOD} idle TCP connections held open.`,
  `Log: the stand-in engine writes ${
    PLAN.logBytes / 1e6
  } MB of 100-byte lines to stdout as fast as it can, through`,
  `the launcher (into \`logs/<name>.log\`, \`--log-max-bytes 1000000000\`), or started by \`sh\` with stdout`,
  `redirected to a file, or piped to \`cat > file\`, or read and discarded by a bare Deno process (Deno's floor for a child's pipe); ${PLAN.logRounds} rounds, order rotated;`,
  `the engine's own time is its \`flood done in\` figure; the launcher's log is read back and its flood bytes counted.`,
  GPU_METHOD,
  DRY_RUN_METHOD,
  PIPELINE_METHOD,
  CATALOGUE_METHOD,
  RELOAD_METHOD,
].join(" ");

/** One phase's part of a report: its rows, its targets, its notes. */
interface Section {
  rows: readonly Row[];
  targets: readonly Verdict[];
  notes?: readonly string[];
}

function loadSection(r: LoadResults): Section {
  return { rows: loadRows(r), targets: loadTargets(r), notes: loadNotes(r) };
}

function memorySection(r: LoadResults): Section {
  return { rows: memoryRows(r), targets: memoryTargets(r) };
}

function startSection(r: StartResults): Section {
  return { rows: startRows(r), targets: startTargets(r) };
}

function authSection(r: AuthResults): Section {
  return { rows: authRows(r), targets: authTargets(r), notes: authNotes(r) };
}

function guardSection(r: GuardResults): Section {
  return { rows: guardRows(r), targets: guardTargets(r), notes: guardNotes(r) };
}

function logSection(r: LogResults): Section {
  return { rows: logRows(r), targets: logTargets(r) };
}

function journalSection(r: JournalResults): Section {
  return { rows: journalRows(r), targets: journalTargets(r) };
}

function gpuSection(r: GpuResults): Section {
  return { rows: gpuRows(r), targets: gpuTargets(r), notes: gpuNotes(r) };
}

function dryRunSection(r: DryRunResults): Section {
  return { rows: dryRunRows(r), targets: [] };
}

function pipelineSection(r: PipelineResults): Section {
  return {
    rows: pipelineRows(r),
    targets: pipelineTargets(r),
    notes: pipelineNotes(r),
  };
}

function catalogueSection(r: CatalogueResults): Section {
  return { rows: catalogueRows(r), targets: catalogueTargets(r) };
}

function reloadSection(r: ReloadResults): Section {
  return { rows: reloadRows(r), targets: reloadTargets(r) };
}

/** The full report. */
export function buildReport(all: AllResults, meta: RunMeta): Report {
  const sections = [
    loadSection(all.load),
    startSection(all.start),
    memorySection(all.load),
    authSection(all.auth),
    guardSection(all.guard),
    logSection(all.log),
    journalSection(all.journal),
    gpuSection(all.gpu),
    dryRunSection(all.dryRun),
    pipelineSection(all.pipeline),
    catalogueSection(all.catalogue),
    reloadSection(all.reload),
  ];
  const rows = sections.flatMap((section) => section.rows);
  const targets = sections.flatMap((section) => section.targets);
  const notes = sections.flatMap((section) => section.notes ?? []);
  const markdown = [
    "# Benchmark: management API",
    "",
    `Run ${
      new Date().toISOString()
    } by \`deno task bench\`: Deno ${Deno.version.deno}, ${meta.wrk}, ` +
    `${navigator.hardwareConcurrency} CPUs, load average ${
      meta.loadBefore.toFixed(2)
    } before and ${meta.loadAfter.toFixed(2)} after, ${
      Math.round(meta.seconds)
    } s in all.`,
    "",
    METHOD,
    "",
    ...tableLines(rows),
    "",
    "## Targets",
    "",
    ...verdictLines(targets),
    ...(notes.length ? ["", "## Notes", "", ...notes] : []),
    "",
  ].join("\n");
  return { markdown, targets };
}

/** A report of one phase (`--auth-only` or one `--only=`). */
function phaseReport(
  title: string,
  method: string,
  { rows, targets, notes = [] }: Section,
): Report {
  const markdown = [
    `# Benchmark: ${title}`,
    "",
    `Run ${
      new Date().toISOString()
    }: Deno ${Deno.version.deno}, ${navigator.hardwareConcurrency} CPUs. ${method}`,
    "",
    ...tableLines(rows),
    "",
    "## Targets",
    "",
    ...verdictLines(targets),
    ...(notes.length ? ["", ...notes] : []),
    "",
  ].join("\n");
  return { markdown, targets: [...targets] };
}

/** The production rows alone. */
export function authReport(auth: AuthResults): Report {
  return phaseReport(
    "production mode (`deno task bench --auth-only`)",
    `\`wrk -t2 -c8\`, ${PLAN.authRounds} rotating rounds of ${PLAN.authSeconds} s; ratios are medians of per-round ratios.`,
    authSection(auth),
  );
}

/** The guard rows alone. */
export function guardReport(guard: GuardResults): Report {
  return phaseReport(
    "connection guard (`deno task bench --only=guard`)",
    `\`wrk -t2 -c8\`, ${PLAN.guardRounds} rounds of ${PLAN.guardSeconds} s; ratios are medians of per-round ratios.`,
    guardSection(guard),
  );
}

/** The log rows alone. */
export function logReport(log: LogResults): Report {
  return phaseReport(
    "engine logs (`deno task bench --only=log`)",
    `${PLAN.logRounds} rounds, order rotated: through the launcher, straight to a file, through \`cat > file\`.`,
    logSection(log),
  );
}

/** The journal rows alone. */
export function journalReport(journal: JournalResults): Report {
  return phaseReport(
    "the journal (`deno task bench --only=journal`)",
    `${PLAN.journalRounds} rounds, order rotated: one supervisor in the bench's process restarts \`sh -c 'exit 3'\` ${PLAN.journalRestarts} times, 1 ms apart, with every transition journaled, and without the journal.`,
    journalSection(journal),
  );
}

/** The GPU lifecycle rows alone. */
export function gpuReport(gpu: GpuResults): Report {
  return phaseReport(
    "GPU lifecycle (`deno task bench --only=gpu`)",
    GPU_METHOD,
    gpuSection(gpu),
  );
}

/** The one-engine rows alone. */
export function pipelineReport(results: PipelineResults): Report {
  return phaseReport(
    "one engine (`deno task bench --only=pipeline`)",
    PIPELINE_METHOD,
    pipelineSection(results),
  );
}

/** The `--dry-run` row alone. */
export function dryRunReport(results: DryRunResults): Report {
  return phaseReport(
    "--dry-run (`deno task bench --only=dryrun`)",
    DRY_RUN_METHOD,
    dryRunSection(results),
  );
}

/** The catalogue rows alone. */
export function catalogueReport(results: CatalogueResults): Report {
  return phaseReport(
    "catalogue loading (`deno task bench --only=catalogue`)",
    CATALOGUE_METHOD,
    catalogueSection(results),
  );
}

/** The drain rows alone (`deno task bench --only=drain`). */
export function drainReport(results: DrainResults): Report {
  return phaseReport(
    "streams through a reload and a stop (`deno task bench --only=drain`)",
    DRAIN_METHOD,
    { rows: drainRows(results), targets: drainTargets(results) },
  );
}

/** The serving rows alone (`deno task bench --only=serving`). */
export function servingReport(results: ServingResults): Report {
  return phaseReport(
    "serving signals (`deno task bench --only=serving`)",
    SERVING_METHOD,
    { rows: servingRows(results), targets: [], notes: servingNotes() },
  );
}

/** The reload rows alone. */
export function reloadReport(results: ReloadResults): Report {
  return phaseReport(
    "/health during reloads (`deno task bench --only=reload`)",
    RELOAD_METHOD,
    reloadSection(results),
  );
}

/** `2 CPUs (AMD EPYC …), 23.5 GiB memory, llama-server's CPU build: no GPU`. */
function machine(engine = "llama-server's CPU build"): string {
  const read = (file: string) => {
    try {
      return Deno.readTextFileSync(file);
    } catch {
      return "";
    }
  };
  const cpu = /^model name\s*:\s*(.+)$/m.exec(read("/proc/cpuinfo"))?.[1];
  const kib = Number(/^MemTotal:\s+(\d+)/m.exec(read("/proc/meminfo"))?.[1]);
  return [
    `${navigator.hardwareConcurrency} CPUs${cpu ? ` (${cpu.trim()})` : ""}`,
    ...(kib ? [`${(kib / 2 ** 20).toFixed(1)} GiB memory`] : []),
    `${engine}: no GPU`,
  ].join(", ");
}

/** The heading of the launcher-woken half's section in `bench/results/residency.md`. */
export const RESIDENCY_VLLM_HEADING =
  "## Launcher-woken: the vLLM stand-in (three cards at 1.25× one GPU)";

/**
 * `text` with its section under `heading` (to the next `## ` heading or the
 * end) replaced by `section`, which starts with that heading; appended when
 * `text` has none.
 */
export function withSection(
  text: string,
  heading: string,
  section: string,
): string {
  const body = section.endsWith("\n") ? section : `${section}\n`;
  const at = text.indexOf(`${heading}\n`);
  if (at < 0) return `${text.trimEnd()}\n\n${body}`;
  const next = text.indexOf("\n## ", at + heading.length);
  return text.slice(0, at) + body + (next < 0 ? "" : text.slice(next + 1));
}

/**
 * The residency rows (`deno task bench --only=residency`), one section per
 * half of issue 54 item 6: the self-waking llama-server measured here; the
 * launcher-woken vLLM stand-in's section holds its place until its rows come
 * (`--only=residency-vllm`; writing the file keeps a measured one).
 */
export function residencyReport(selfWaking: ResidencyResults): Report {
  const targets = residencyTargets(selfWaking);
  const notes = residencyNotes(selfWaking);
  const markdown = [
    "# Benchmark: more models than memory (`deno task bench --only=residency`, `--only=residency-vllm`)",
    "",
    `Run ${
      new Date().toISOString()
    }: Deno ${Deno.version.deno}, ${machine()}, ` +
    `load average ${selfWaking.load[0].toFixed(2)} before and ${
      selfWaking.load[1].toFixed(2)
    } after, ${selfWaking.seconds.toFixed(0)} s in all.`,
    "",
    "## Self-waking: the real llama-server asleep, awake and cold, on CPU",
    "",
    residencyMethod(selfWaking),
    "",
    ...tableLines(residencyRows(selfWaking)),
    "",
    "### Targets",
    "",
    ...verdictLines(targets),
    ...(notes.length ? ["", ...notes] : []),
    "",
    RESIDENCY_VLLM_HEADING,
    "",
    "Not measured yet: 100 alternating requests with streams in flight; failed requests, out-of-memory events, switch seconds p50/p95 over the engine's own wake time.",
    "",
  ].join("\n");
  return { markdown, targets };
}

/**
 * The launcher-woken half's section (`deno task bench --only=residency-vllm`),
 * under {@linkcode RESIDENCY_VLLM_HEADING}: its own run line, the method, the
 * rows, the targets and where a switch's time goes.
 */
export function residencyVllmReport(r: VllmResidencyResults): Report {
  const targets = residencyVllmTargets(r);
  const markdown = [
    RESIDENCY_VLLM_HEADING,
    "",
    `Run ${new Date().toISOString()}: Deno ${Deno.version.deno}, ${
      machine("the vLLM stand-in")
    }, load average ${r.load[0].toFixed(2)} before and ${
      r.load[1].toFixed(2)
    } after, ${
      r.seconds.toFixed(0)
    } s in all. **Stand-in figures, not GPU figures.**`,
    "",
    residencyVllmMethod(r),
    "",
    ...tableLines(residencyVllmRows(r)),
    "",
    "### Targets",
    "",
    ...verdictLines(targets),
    "",
    ...residencyVllmNotes(r),
    "",
  ].join("\n");
  return { markdown, targets };
}
