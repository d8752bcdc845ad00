/**
 * The command line: flags in, options out; a usage error is one line, exit 2;
 * `main` runs the launcher and turns the outcome into an exit code. One table
 * of flags: `parseCli` reads through it, `--help` prints it, the tests check
 * the docs against it (`cli_flags.ts`).
 *
 * Folder `serve/`: config → facts → plan → diff → apply (`launcher.ts`).
 * `serve` knows every other room; every other room knows nothing of it.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { closeMatches } from "../common/close_matches.ts";
import { VERSION } from "../common/version.ts";
import { log } from "../common/log.ts";
import {
  MAX_TIMER_MS,
  secondsExpected,
  secondsToMs,
} from "../common/seconds.ts";
import { Semioserve } from "./launcher.ts";
import { renderPlan } from "./start_plan.ts";
import { holdEarlySignals } from "./signals.ts";
import { UsageError } from "./config.ts";
import {
  type BooleanFlag,
  CLI_FLAGS,
  type CliFlag,
  type CliOptions,
  helpFor,
} from "./cli_flags.ts";

export const USAGE = `Usage:
  deno run -A jsr:@mymodel/serve <model> [<model> ...] --directory D [options]
  deno task start <model> [<model> ...] [options]    (in a checkout; MY_LOCAL=D set)

Starts one inference engine per catalogue model (ports --port+1, --port+2, ...)
and serves GET /health and GET /models on --port, until Ctrl-C or SIGTERM.

Required:
  <model>              a catalogue name, or <VERB>:<name> (e.g. CHAT:llama-3)
${helpFor("Required")}

Example:
  mkdir -p /srv/mymodel/models /srv/mymodel/logs /srv/mymodel/metrics /srv/mymodel/data
  deno run -A jsr:@mymodel/serve llama-3 --directory /srv/mymodel --port 5000

Models:
${helpFor("Models")}

Checks:
${helpFor("Checks")}
  e.g. deno run -A jsr:@mymodel/serve llama-3 bge-m3 --directory /srv/mymodel --dry-run
       deno run -A jsr:@mymodel/serve llama-3 --directory /srv/mymodel --dry-run --json

API and connections:
${helpFor("API and connections")}

GPUs:
${helpFor("GPUs")}

Supervision:
${helpFor("Supervision")}

Logs (engine output in <directory>/logs/<model>.log):
${helpFor("Logs")}

  -h, --help           print this help and exit
  --version            print the version (${VERSION}) and exit
  SECONDS              decimal, at most ${
  MAX_TIMER_MS / 1000
} (2^31-1 ms, what a timer holds)

Exit codes:
  0  stopped cleanly (SIGTERM or SIGINT); with --dry-run, a start would proceed
  1  start-up failed, or would fail with --dry-run (one line on stderr says why)
  2  usage error (an unknown flag or a bad value)

Signals: SIGTERM or SIGINT stops every engine, then the launcher; SIGHUP reloads
the catalogue, the TLS pair and the *_FILE secrets without touching unchanged
engines. The engines' state: deno run -A jsr:@mymodel/serve/status (or
deno task status in a checkout).
`;

const FLAGS: Record<string, { type: "string" | "boolean"; short?: string }> =
  Object.fromEntries([
    ...CLI_FLAGS.flatMap((flag) =>
      flag.unit === "boolean"
        ? [
          [flag.name, { type: "boolean" }],
          ...(flag.negatable ? [[`no-${flag.name}`, { type: "boolean" }]] : []),
        ]
        : [[flag.name, { type: "string" }]]
    ),
    ["help", { type: "boolean", short: "h" }],
    ["version", { type: "boolean" }],
  ]);

/** The long flags, as typed (`--port`). */
export const FLAG_NAMES: readonly string[] = Object.keys(FLAGS).map((name) =>
  `--${name}`
);

/** `; did you mean --port?` for an unknown flag close to a known one, else "". */
function flagHint(flag: string): string {
  const typed = flag.replace(/^-+/, "").replace(/=.*$/, "");
  // The closest one only: flags share words (log, gpu), so a list would mostly guess.
  const [best] = closeMatches(typed, Object.keys(FLAGS), 1);
  return best === undefined ? "" : `; did you mean --${best}?`;
}

const TRUE = new Set(["true", "1", "yes", "on"]);
const FALSE = new Set(["false", "0", "no", "off"]);

const NEGATABLE = CLI_FLAGS.filter((flag): flag is CliFlag & BooleanFlag =>
  flag.unit === "boolean" && flag.negatable === true
).map((flag) => ({
  name: flag.name,
  // `-` and `_` are interchangeable: --dev-mode is --dev_mode.
  pattern: new RegExp(
    `^--(no-)?${flag.name.replace(/[-_]/g, "[-_]")}(?:=(.*))?$`,
  ),
}));

/** Folds a negatable switch's spellings into `--<name>` / `--no-<name>`. */
function normalizeSwitches(args: readonly string[]): string[] {
  const out: string[] = [];
  for (let index = 0; index < args.length; index++) {
    const arg = args[index]!;
    if (arg === "--") {
      out.push(...args.slice(index));
      break;
    }
    // parseArgs calls `--grace -1` ambiguous: a value that reads as a number is the flag's.
    if (
      FLAGS[arg.slice(2)]?.type === "string" && arg.startsWith("--") &&
      /^-[\d.]/.test(args[index + 1] ?? "")
    ) {
      out.push(`${arg}=${args[++index]}`);
      continue;
    }
    // parseArgs reads `-port` as -p -o -r -t and names only `-p`.
    if (/^-[^-]{2,}/.test(arg) && !/^-\d/.test(arg)) {
      const hint = flagHint(arg);
      throw new UsageError(
        `Cannot parse the command line: Unknown option '${arg}'${hint}`,
      );
    }
    const flag = NEGATABLE.find(({ pattern }) => pattern.test(arg));
    const [, negated, value] = flag?.pattern.exec(arg) ?? [];
    if (!flag || value === undefined) {
      out.push(flag ? `--${negated ?? ""}${flag.name}` : arg);
      continue;
    }
    const lowered = value.toLowerCase();
    if (negated || (!TRUE.has(lowered) && !FALSE.has(lowered))) {
      throw new UsageError(
        `Cannot use ${arg}: expected --${flag.name}, --${flag.name}=true or --${flag.name}=false`,
      );
    }
    out.push(TRUE.has(lowered) ? `--${flag.name}` : `--no-${flag.name}`);
  }
  return out;
}

/** A flag's value as typed, as its option holds it; one line when it is bad. */
function readFlag(flag: Exclude<CliFlag, BooleanFlag>, text: string): unknown {
  if (flag.unit === "text") {
    if (text === "") {
      throw new UsageError(
        `Cannot use --${flag.name}: expected a non-empty value`,
      );
    }
    try {
      return flag.parse ? flag.parse(text) : text;
    } catch (error) {
      throw new UsageError((error as Error).message);
    }
  }
  if (flag.unit === "seconds") {
    const ms = secondsToMs(text, flag.min);
    const expected = secondsExpected(flag.min);
    if (ms === undefined) {
      throw new UsageError(
        `Cannot use --${flag.name}=${text}: expected ${expected}`,
      );
    }
    return ms;
  }
  const value = Number(text);
  if (
    !/^\s*\d+\s*$/.test(text) || !Number.isSafeInteger(value) ||
    value < flag.min
  ) {
    throw new UsageError(
      `Cannot use --${flag.name}=${text}: expected a whole number, ${flag.min} or more`,
    );
  }
  return value;
}

/** The models and ports are checked by `readConfig`. @throws {UsageError} */
export function parseCli(args: readonly string[]): CliOptions {
  let parsed;
  const normalized = normalizeSwitches(args);
  try {
    parsed = parseArgs({
      args: normalized,
      allowPositionals: true,
      strict: true,
      options: FLAGS,
    });
  } catch (error) {
    // node's messages are multi-line and mention node: keep the first line.
    const first = (error as Error).message.split("\n")[0]?.replace(
      /\. To specify a positional argument.*$/,
      "",
    );
    const ambiguous = /^Option '(--[^' ,]+)[^']*' argument is ambiguous/
      .exec(first ?? "")?.[1];
    if (ambiguous) {
      const next = normalized[normalized.indexOf(ambiguous) + 1];
      throw new UsageError(
        `Cannot use ${ambiguous} ${next}: expected a value after ${ambiguous} (one starting with - is written ${ambiguous}=${next})`,
      );
    }
    const unknown = /^Unknown option '([^']+)'/.exec(first ?? "")?.[1];
    const hint = unknown === undefined ? "" : flagHint(unknown);
    throw new UsageError(`Cannot parse the command line: ${first}${hint}`);
  }
  const { values, positionals } = parsed;
  const options: CliOptions = {
    models: positionals,
    help: !!values.help,
    ...values.version ? { version: true } : {},
  };
  if (options.help || options.version) return options;
  for (const spec of positionals) {
    if (!spec.slice(spec.indexOf(":") + 1)) {
      throw new UsageError(
        `Cannot use model '${spec}': expected <name> or <VERB>:<name>`,
      );
    }
  }
  const set = options as Record<string, unknown>;
  for (const flag of CLI_FLAGS) {
    const value = values[flag.name];
    if (flag.unit !== "boolean") {
      if (typeof value === "string") set[flag.option] = readFlag(flag, value);
      continue;
    }
    const negated = flag.negatable && values[`no-${flag.name}`];
    if (value && negated) {
      throw new UsageError(
        `Cannot use both --${flag.name} and --no-${flag.name}: expected one`,
      );
    }
    if (value || negated) set[flag.option] = !negated;
  }
  if (options.json && !options.dryRun) {
    throw new UsageError(
      "Cannot use --json without --dry-run: expected --dry-run --json",
    );
  }
  return options;
}

/**
 * The command-line program: parses `args`, runs the launcher until SIGTERM or
 * SIGINT, and returns the exit code (0 after a clean stop, 1 when start-up
 * fails, 2 on a usage error). With `--dry-run` it prints the plan (as JSON
 * with `--json`) and returns 0 when a start would proceed, 1 with the start's
 * own error line when it would not.
 *
 * @param args The command-line arguments.
 * @returns The process exit code.
 *
 * @example
 * ```ts ignore
 * import { main } from "@mymodel/serve/serve";
 * Deno.exit(await main(["llama-3", "--port", "5000"]));
 * ```
 */
export async function main(
  args: readonly string[] = Deno.args,
): Promise<number> {
  // Before anything is awaited: a SIGTERM from now on stops the start-up cleanly.
  using early = holdEarlySignals();
  /** Exit 0 with one line, when a signal came before the API listened. */
  const stoppedEarly = (listening: boolean) => {
    if (!early.received || listening) return false;
    log.info(
      `stopped during start-up (${early.received}): nothing left running`,
    );
    return true;
  };
  let cli: CliOptions | undefined;
  try {
    cli = parseCli(args);
    const { help, version, dryRun, json, ...options } = cli;
    if (help || version) {
      console.log(help ? USAGE : VERSION);
      return 0;
    }
    if (stoppedEarly(false)) return 0;
    const serve = new Semioserve({ ...options, signal: early.signal });
    if (dryRun) {
      const plan = await serve.plan();
      if (stoppedEarly(false)) return 0;
      console.log(json ? JSON.stringify(plan, null, 2) : renderPlan(plan));
      return 0;
    }
    const running = serve.run();
    early.handOver(() => void serve.reload());
    await running;
    stoppedEarly(serve.url !== undefined);
    return 0;
  } catch (error) {
    if (error instanceof UsageError) {
      log.error(`${error.message} (see --help)`);
      return 2;
    }
    // What the stop cut short (the catalogue's read) is the stop, not a refusal.
    if (stoppedEarly(false)) return 0;
    const message = error instanceof Error ? error.message : String(error);
    const line = message.replaceAll("\n", " ");
    log.error(line);
    // A program reading --json gets an answer on stdout too.
    if (cli?.dryRun && cli.json) {
      console.log(JSON.stringify({ ok: false, error: line }));
    }
    return 1;
  }
}
