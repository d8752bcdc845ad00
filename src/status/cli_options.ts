/**
 * The status command line: flags to options, usage errors as one line.
 *
 * @module
 */
import { parseArgs } from "node:util";
import type { StatusOptions } from "./client.ts";
import { portIn } from "../common/settings.ts";

/** A command line that cannot be used (exit 2). */
export class StatusUsageError extends Error {
  /** @param message One line naming the flag and what was expected. */
  constructor(message: string) {
    super(message);
    this.name = "StatusUsageError";
  }
}

/** What the command line asks for. */
export interface StatusCli {
  help: boolean;
  json: boolean;
  check: boolean;
  /** Seconds between redraws, when watching. */
  watch?: number;
  /** A file holding the token, read when the command runs. */
  tokenFile?: string;
  options: StatusOptions;
}

/** The usage text. */
export const STATUS_USAGE =
  `Usage: deno task status [--host H] [--port P] [--directory D] [--url URL]
    [--token-file FILE] [--json] [--watch SECONDS] [--check]

Shows every engine of a running launcher (GET /models?detail=1), one row each.

  --host H            the launcher's host (env NUCLEUS_HOST, else localhost)
  --port P            its management port (env NUCLEUS_PORT, else 5000)
  --directory D       its root directory (env MY_LOCAL): HTTPS when ssl/server.crt and
                      ssl/server.key are there, trusting ssl/ca.crt, else ssl/server.crt
  --url URL           the launcher's URL outright (https://gpu-7:5000)
  --token-file FILE   a file holding the production token (else env NUCLEUS_TOKEN)
  --json              print the answer as received
  --watch SECONDS     redraw every SECONDS until Ctrl-C
  --check             exit 3 when any engine is not healthy, else 0
  -h, --help          this text

Exit codes: 0 shown (all healthy with --check), 1 cannot ask the launcher,
2 usage error, 3 an engine is not healthy (--check).`;

/**
 * Parses the status command line.
 *
 * @throws {StatusUsageError} On an unknown flag, a missing or bad value.
 */
export function parseStatusCli(args: readonly string[]): StatusCli {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...args],
      strict: true,
      allowPositionals: false,
      options: {
        host: { type: "string" },
        port: { type: "string" },
        directory: { type: "string" },
        url: { type: "string" },
        "token-file": { type: "string" },
        json: { type: "boolean", default: false },
        watch: { type: "string" },
        check: { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
    });
  } catch (error) {
    const first = (error as Error).message.split("\n")[0];
    throw new StatusUsageError(`Cannot parse the command line: ${first}`);
  }
  const v = parsed.values;
  for (const key of ["host", "directory", "url", "token-file"] as const) {
    if (v[key] !== undefined && v[key].trim() === "") {
      throw new StatusUsageError(
        `Cannot use --${key}: expected a non-empty value`,
      );
    }
  }
  const options: StatusOptions = {};
  if (v.host !== undefined) options.host = v.host;
  if (v.directory !== undefined) options.directory = v.directory;
  if (v.url !== undefined) {
    if (v.host !== undefined || v.port !== undefined) {
      throw new StatusUsageError(
        "Cannot use --url with --host or --port (expected one way to say where the launcher is)",
      );
    }
    options.url = v.url;
  }
  if (v.port !== undefined) {
    const port = portIn(v.port);
    if (port === undefined) {
      throw new StatusUsageError(
        `Cannot use --port ${
          JSON.stringify(v.port)
        }: expected an integer from 1 to 65535`,
      );
    }
    options.port = port;
  }
  const cli: StatusCli = {
    help: v.help,
    json: v.json,
    check: v.check,
    options,
  };
  if (v.watch !== undefined) {
    const seconds = Number(v.watch);
    if (v.watch.trim() === "" || !Number.isFinite(seconds) || seconds < 0.5) {
      throw new StatusUsageError(
        `Cannot use --watch ${
          JSON.stringify(v.watch)
        }: expected seconds, 0.5 or more`,
      );
    }
    if (v.check) {
      throw new StatusUsageError(
        "Cannot use --watch with --check (expected one: --check answers once, for scripts)",
      );
    }
    cli.watch = seconds;
  }
  if (v["token-file"] !== undefined) cli.tokenFile = v["token-file"];
  return cli;
}
