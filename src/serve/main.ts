/**
 * The command-line program over {@linkcode Semioserve}: parse, run, and turn
 * the outcome into an exit code.
 *
 * @module
 */
import { log } from "../common/log.ts";
import { type CliOptions, parseCli, USAGE, UsageError } from "./cli.ts";
import { Semioserve } from "./launcher.ts";
import { renderPlan } from "./start_plan.ts";
import { VERSION } from "../common/version.ts";
import { holdEarlySignals } from "./early_signals.ts";

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
