/**
 * The command-line program over {@linkcode Semioserve}: parse, run, and turn
 * the outcome into an exit code.
 *
 * @module
 */
import { log } from "../common/log.ts";
import { parseCli, USAGE, UsageError } from "./cli.ts";
import { Semioserve } from "./launcher.ts";

/**
 * The command-line program: parses `args`, runs the launcher until SIGTERM or
 * SIGINT, and returns the exit code (0 after a clean stop, 1 when start-up
 * fails, 2 on a usage error).
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
  let cli;
  try {
    cli = parseCli(args);
    if (cli.port !== undefined && cli.port + cli.models.length > 65535) {
      throw new UsageError(
        `Cannot use --port ${cli.port} for ${cli.models.length} models: engine ports would pass 65535`,
      );
    }
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    log.error(`${error.message} (see --help)`);
    return 2;
  }
  if (cli.help) {
    console.log(USAGE);
    return 0;
  }
  const { help: _, ...options } = cli;
  try {
    await new Semioserve(options).run();
    return 0;
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    log.error(message.replaceAll("\n", " "));
    return 1;
  }
}
