/**
 * The status view's program: {@linkcode statusRows} for embedders, `main`
 * for the command line.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { ConfigError } from "../common/config_error.ts";
import { portIn } from "../common/settings.ts";
import { sleep } from "../common/sleep.ts";
import { fetchDetail, type StatusOptions } from "./client.ts";
import { renderTable, rowsOf, type StatusRow } from "./table.ts";
import { durationMs, escapedJson, showEvents } from "./events.ts";

/**
 * One row per engine of a running launcher, in request order.
 *
 * @param options Where the launcher is; unset fields follow its own defaults.
 * @returns The rows.
 * @throws {StatusError} When the launcher cannot be asked or answers something else.
 * @throws {ConfigError} When an option or environment variable cannot be used.
 *
 * @example
 * ```ts
 * import { statusRows } from "@mymodel/serve/status";
 * const rows = await statusRows({ port: 5000 }).catch(() => []);
 * console.log(rows.filter((row) => !row.healthy).map((row) => row.model));
 * ```
 */
export async function statusRows(
  options: StatusOptions = {},
): Promise<StatusRow[]> {
  return rowsOf(await fetchDetail(options));
}

/** Never with `NO_COLOR` set (no-color.org). */
function wantsColour(): boolean {
  const noColor = Deno.env.get("NO_COLOR");
  return (noColor === undefined || noColor === "") &&
    Deno.stdout.isTerminal();
}

function readToken(path: string): string {
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch (error) {
    throw new ConfigError(
      `Cannot read --token-file ${path}: ${
        (error as Error).message
      } (expected a readable file holding the token)`,
      { cause: error },
    );
  }
  const token = text.replace(/\r?\n$/, "");
  if (token.trim() === "") {
    throw new ConfigError(
      `Cannot use --token-file ${path}: the file is empty (expected the token)`,
    );
  }
  return token;
}

/** A terminal's width, for rows that fit it; none in a pipe or with `--wide`. */
function terminalWidth(wide: boolean): number | undefined {
  if (wide || !Deno.stdout.isTerminal()) return undefined;
  try {
    return Deno.consoleSize().columns;
  } catch {
    return undefined;
  }
}

/** How a table is shown. */
interface Show {
  json: boolean;
  colour: boolean;
  wide: boolean;
}

/** Whether every engine is healthy. */
async function showOnce(
  options: StatusOptions,
  show: Show,
): Promise<boolean> {
  const detail = await fetchDetail(options);
  const rows = rowsOf(detail);
  const width = terminalWidth(show.wide);
  if (show.json) console.log(escapedJson(JSON.stringify(detail, null, 2)));
  else if (rows.length === 0) console.log("no engines");
  else {
    console.log(renderTable(rows, {
      now: Date.now(),
      color: show.colour,
      ...(width === undefined ? {} : { width }),
    }));
  }
  return rows.every((row) => row.healthy);
}

/**
 * Runs the status command line.
 *
 * @param args The command-line arguments.
 * @returns 0 shown, 1 cannot ask, 2 usage error, 3 an engine not healthy (`--check`).
 *
 * @example
 * ```ts
 * import { main } from "@mymodel/serve/status";
 * console.assert(await main(["--help"]) === 0);
 * ```
 */
export async function main(
  args: readonly string[] = Deno.args,
): Promise<number> {
  let cli;
  try {
    cli = parseStatusCli(args);
  } catch (error) {
    if (!(error instanceof StatusUsageError)) throw error;
    console.error(`${error.message} (see --help)`);
    return 2;
  }
  if (cli.help) {
    console.log(STATUS_USAGE);
    return 0;
  }
  if (cli.events) return await events(cli);
  const show = {
    json: cli.json,
    colour: !cli.json && wantsColour(),
    wide: cli.wide,
  };
  try {
    const options = { ...cli.options };
    if (cli.tokenFile !== undefined) options.token = readToken(cli.tokenFile);
    if (cli.watch === undefined) {
      const healthy = await showOnce(options, show);
      return cli.check && !healthy ? 3 : 0;
    }
    return await watch(options, cli.watch, show);
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    console.error(message.replaceAll("\n", " "));
    return 1;
  }
}

/** `body`'s signal aborts on SIGINT or SIGTERM (when `listen`). */
async function untilStopped<T>(
  listen: boolean,
  body: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  const signals: Deno.Signal[] = listen ? ["SIGINT", "SIGTERM"] : [];
  for (const signal of signals) Deno.addSignalListener(signal, onSignal);
  try {
    return await body(stop.signal);
  } finally {
    for (const signal of signals) Deno.removeSignalListener(signal, onSignal);
  }
}

function events(cli: StatusCli): Promise<number> | number {
  const directory = cli.options.directory ?? Deno.env.get("MY_LOCAL");
  if (!directory) {
    console.error(
      "Cannot read the journal: no directory (pass --directory or set MY_LOCAL)",
    );
    return 1;
  }
  return untilStopped(cli.follow, (signal) =>
    showEvents({
      directory,
      json: cli.json,
      follow: cli.follow,
      signal,
      ...(cli.model === undefined ? {} : { model: cli.model }),
      ...(cli.since === undefined ? {} : { since: Date.now() - cli.since }),
    }));
}

/** A failed round shows its line and goes on. */
function watch(
  options: StatusOptions,
  seconds: number,
  show: Show,
): Promise<number> {
  const terminal = Deno.stdout.isTerminal();
  return untilStopped(true, async (signal) => {
    while (!signal.aborted) {
      // Home and clear on a terminal; in a pipe or a log, rounds follow each other.
      if (terminal) console.log("\x1b[H\x1b[2J");
      console.log(`every ${seconds} s, ${new Date().toISOString()}`);
      try {
        await showOnce(options, show);
      } catch (error) {
        if (error instanceof ConfigError) throw error;
        console.error((error as Error).message);
      }
      await sleep(seconds * 1000, signal);
    }
    return 0;
  });
}

/** Exit 2. */
class StatusUsageError extends Error {}

interface StatusCli {
  help: boolean;
  json: boolean;
  wide: boolean;
  check: boolean;
  watch?: number;
  tokenFile?: string;
  events: boolean;
  follow: boolean;
  model?: string;
  /** Milliseconds. */
  since?: number;
  options: StatusOptions;
}

const STATUS_USAGE =
  `Usage: deno task status [--host H] [--port P] [--directory D] [--url URL]
    [--token-file FILE] [--json] [--wide] [--watch SECONDS] [--check]
       deno task status --events [--directory D] [--follow] [--model M] [--since 30m] [--json]

Shows every engine of a running launcher (GET /models?detail=1), one row each
(REQ: requests running, +N waiting; TOK/S: generated tokens per second; both
read from the engine's own metrics); on a terminal each row fits its width, the
free text cut with …; with --events, the journal of D/logs/events.jsonl instead (newest last).

  --host H            the launcher's host (env NUCLEUS_HOST, else localhost)
  --port P            its management port (env NUCLEUS_PORT, else 5000)
  --directory D       its root directory (env MY_LOCAL): HTTPS when ssl/server.crt and
                      ssl/server.key are there, trusting ssl/ca.crt, else ssl/server.crt
  --url URL           the launcher's URL outright (https://gpu-7:5000)
  --token-file FILE   a file holding the production token (else env NUCLEUS_TOKEN)
  --json              print the answer as received
  --wide              whole rows on a terminal too (as in a pipe)
  --watch SECONDS     redraw every SECONDS until Ctrl-C
  --check             exit 3 when any engine is not healthy, else 0
  --events            print the journal: every state change and launcher event
  --follow            with --events: keep printing new events until Ctrl-C
  --model M           with --events: only M's events (and the launcher's)
  --since DURATION    with --events: only the last DURATION (45s, 30m, 2h, 1d)
  -h, --help          this text

Exit codes: 0 shown (all healthy with --check), 1 cannot ask the launcher
(or no journal), 2 usage error, 3 an engine is not healthy (--check).`;

function parseStatusCli(args: readonly string[]): StatusCli {
  let v;
  try {
    v = parseArgs({
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
        wide: { type: "boolean", default: false },
        watch: { type: "string" },
        check: { type: "boolean", default: false },
        events: { type: "boolean", default: false },
        follow: { type: "boolean", default: false },
        model: { type: "string" },
        since: { type: "string" },
        help: { type: "boolean", short: "h", default: false },
      },
    }).values;
  } catch (error) {
    const first = (error as Error).message.split("\n")[0];
    throw new StatusUsageError(`Cannot parse the command line: ${first}`);
  }
  const usage = (message: string) => new StatusUsageError(message);
  for (const key of ["host", "directory", "url", "token-file"] as const) {
    if (v[key]?.trim() === "") {
      throw usage(`Cannot use --${key}: expected a non-empty value`);
    }
  }
  if (v.url !== undefined && (v.host !== undefined || v.port !== undefined)) {
    throw usage(
      "Cannot use --url with --host or --port (expected one way to say where the launcher is)",
    );
  }
  const port = v.port === undefined ? undefined : portIn(v.port);
  if (v.port !== undefined && port === undefined) {
    throw usage(
      `Cannot use --port ${
        JSON.stringify(v.port)
      }: expected an integer from 1 to 65535`,
    );
  }
  if (
    !v.events && (v.follow || v.model !== undefined || v.since !== undefined)
  ) {
    throw usage(
      "Cannot use --follow, --model or --since without --events (expected --events)",
    );
  }
  const since = v.since === undefined ? undefined : durationMs(v.since);
  if (v.since !== undefined && since === undefined) {
    throw usage(
      `Cannot use --since ${
        JSON.stringify(v.since)
      }: expected a duration such as 45s, 30m, 2h or 1d`,
    );
  }
  const watch = v.watch === undefined ? undefined : Number(v.watch);
  if (
    v.watch !== undefined &&
    !(v.watch.trim() !== "" && Number.isFinite(watch) && watch! >= 0.5)
  ) {
    throw usage(
      `Cannot use --watch ${
        JSON.stringify(v.watch)
      }: expected seconds, 0.5 or more`,
    );
  }
  if (watch !== undefined && v.check) {
    throw usage(
      "Cannot use --watch with --check (expected one: --check answers once, for scripts)",
    );
  }
  const { help, json, wide, check, events, follow, model } = v;
  const tokenFile = v["token-file"];
  const options = { host: v.host, directory: v.directory, url: v.url, port };
  return {
    help,
    json,
    wide,
    check,
    events,
    follow,
    options: defined(options),
    ...defined({ watch, tokenFile, model, since }),
  };
}

/** Without its undefined fields, as `exactOptionalPropertyTypes` wants. */
function defined<T extends object>(
  fields: T,
): { [K in keyof T]?: Exclude<T[K], undefined> } {
  return Object.fromEntries(
    Object.entries(fields).filter(([, value]) => value !== undefined),
  ) as { [K in keyof T]?: Exclude<T[K], undefined> };
}
