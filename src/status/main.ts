import { parseArgs } from "node:util";
import { ConfigError } from "../common/config_error.ts";
import { portIn } from "../common/settings.ts";
import { sleep } from "../common/sleep.ts";
import { fetchDetail, readToken } from "./client.ts";
import { DROPS, healthy, renderTable, rowsOf } from "./table.ts";
import { durationMs, escapedJson, showEvents } from "./events.ts";

const STATUS_USAGE =
  `Usage: deno task status [--host H] [--port P] [--directory D] [--url URL]
    [--token-file FILE] [--json] [--wide] [--watch SECONDS] [--check]
       deno task status --events [--directory D] [--follow] [--model M] [--since 30m] [--json]

Shows every engine of a running launcher (GET /models?detail=1), one row each
(REQ: requests running, +N waiting; TOK/S: generated tokens per second; both
read from the engine's own metrics; MEM: the memory its run took, from its own
load lines and nvidia-smi). On a terminal each row fits its width:
LAST EXIT and STATE are cut with …, then columns are dropped, first to last:
  ${DROPS.join(", ")}
(MODEL stays whole). With --events, the journal of D/logs/events.jsonl instead
(newest last).

  --host H            the launcher's host (env NUCLEUS_HOST, else localhost)
  --port P            its management port (env NUCLEUS_PORT, else 5000)
  --directory D       its root directory (env MY_LOCAL): HTTPS when ssl/server.crt and
                      ssl/server.key are there, trusting ssl/ca.crt, else ssl/server.crt
  --url URL           the launcher's URL outright (https://gpu-7:5000)
  --token-file FILE   a file holding the production token (else env NUCLEUS_TOKEN)
  --json              print the answer as received
  --wide              every column, whole, on a terminal too (as in a pipe)
  --watch SECONDS     redraw every SECONDS until Ctrl-C
  --check             exit 3 when any engine is not healthy, else 0
  --events            print the journal: every state change and launcher event
  --follow            with --events: keep printing new events until Ctrl-C
  --model M           with --events: only M's events (and the launcher's)
  --since DURATION    with --events: only the last DURATION (45s, 30m, 2h, 1d)
  -h, --help          this text

Exit codes: 0 shown (all healthy with --check), 1 cannot ask the launcher
(or no journal), 2 usage error, 3 an engine is not healthy (--check).`;

/** The command line, checked; a usage error throws its one line. */
function parseCli(args: readonly string[]) {
  let v;
  try {
    v = parseArgs({
      args: [...args],
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
    throw new Error(`Cannot parse the command line: ${first}`);
  }
  const empty = (["host", "directory", "url", "token-file"] as const)
    .find((key) => v[key]?.trim() === "");
  const port = v.port === undefined ? undefined : portIn(v.port);
  const last = v.since === undefined ? undefined : durationMs(v.since);
  const watch = v.watch === undefined ? undefined : Number(v.watch);
  const bad = (flag: "port" | "since" | "watch", expected: string) =>
    `Cannot use --${flag} ${JSON.stringify(v[flag])}: expected ${expected}`;
  const problem = [
    empty !== undefined && `Cannot use --${empty}: expected a non-empty value`,
    v.url !== undefined && (v.host !== undefined || v.port !== undefined) &&
    "Cannot use --url with --host or --port (expected one way to say where the launcher is)",
    v.port !== undefined && port === undefined &&
    bad("port", "an integer from 1 to 65535"),
    !v.events && (v.follow || v.model !== undefined || v.since !== undefined) &&
    "Cannot use --follow, --model or --since without --events (expected --events)",
    v.since !== undefined && last === undefined &&
    bad("since", "a duration such as 45s, 30m, 2h or 1d"),
    watch !== undefined && !(Number.isFinite(watch) && watch >= 0.5) &&
    bad("watch", "seconds, 0.5 or more"),
    watch !== undefined && v.check &&
    "Cannot use --watch with --check (expected one: --check answers once, for scripts)",
  ].find((message) => message !== false);
  if (problem) throw new Error(problem);
  const since = last === undefined ? undefined : Date.now() - last;
  return { ...v, port, since, watch };
}

type Cli = ReturnType<typeof parseCli> & { token?: string | undefined };

/**
 * Runs the status command line.
 *
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
    cli = parseCli(args);
  } catch (error) {
    console.error(`${(error as Error).message} (see --help)`);
    return 2;
  }
  if (cli.help) {
    console.log(STATUS_USAGE);
    return 0;
  }
  if (cli.events) {
    using stop = cli.follow ? onStop() : undefined;
    return await showEvents({ ...cli, signal: stop?.signal });
  }
  try {
    const asked = { ...cli, token: readToken(cli["token-file"]) };
    if (cli.watch !== undefined) return await watch(asked, cli.watch);
    return (await showOnce(asked)) || !cli.check ? 0 : 3;
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    console.error(message.replaceAll("\n", " "));
    return 1;
  }
}

/** Whether every engine is healthy. */
async function showOnce(cli: Cli): Promise<boolean> {
  const detail = await fetchDetail(cli);
  const rows = rowsOf(detail);
  const terminal = Deno.stdout.isTerminal();
  if (cli.json) console.log(escapedJson(JSON.stringify(detail, null, 2)));
  else if (rows.length === 0) console.log("no engines");
  else {
    console.log(renderTable(rows, {
      now: Date.now(),
      // Never with NO_COLOR set (no-color.org).
      color: terminal && !Deno.env.get("NO_COLOR"),
      // A terminal's rows fit its width; a pipe and --wide get them whole.
      width: terminal && !cli.wide ? Deno.consoleSize().columns : undefined,
    }));
  }
  return rows.every(healthy);
}

/** A failed round shows its line and goes on. */
async function watch(cli: Cli, seconds: number): Promise<number> {
  using stop = onStop();
  const terminal = Deno.stdout.isTerminal();
  while (!stop.signal.aborted) {
    // Home and clear on a terminal; in a pipe or a log, rounds follow each other.
    if (terminal) console.log("\x1b[H\x1b[2J");
    console.log(`every ${seconds} s, ${new Date().toISOString()}`);
    try {
      await showOnce(cli);
    } catch (error) {
      if (error instanceof ConfigError) throw error;
      console.error((error as Error).message);
    }
    await sleep(seconds * 1000, stop.signal);
  }
  return 0;
}

const STOP_SIGNALS: Deno.Signal[] = ["SIGINT", "SIGTERM"];

/** Ctrl-C ends --watch and --follow with exit 0: the signal aborts, until disposed. */
function onStop(): AbortController & Disposable {
  const stop = new AbortController();
  const abort = () => stop.abort();
  for (const name of STOP_SIGNALS) Deno.addSignalListener(name, abort);
  return Object.assign(stop, {
    [Symbol.dispose]() {
      for (const name of STOP_SIGNALS) Deno.removeSignalListener(name, abort);
    },
  });
}
