/**
 * The demo: the launcher in development mode over a real engine, on a machine
 * with nothing but Node.js (for npm) and Debian's build tools.
 *
 * ```sh
 * deno task demo                  # ./.demo, management API on :5000, engine on :5001
 * deno task demo --port 6000 --directory /tmp/demo
 * deno task demo --smoke          # one chat completion, then stop: for CI
 * ```
 *
 * It builds `llama-server` once (or reuses the cached build, see
 * `tools/llama_server.ts`), creates the root directory (`models/ logs/
 * metrics/ data/`), writes the tiny random-weight model into
 * `models/tiny-llama/` unless it is there, and runs the launcher CLI
 * (`mod.ts tiny-llama --dev_mode`) as a child whose log goes to this terminal.
 * Once `GET /models` reports `tiny-llama` healthy it prints what to try.
 *
 * Ctrl-C reaches the launcher too (same process group); a signal sent to the
 * demo alone is passed on to it (the launcher takes a copy that arrives at once
 * as the same request). The demo then waits for the launcher to stop its
 * engine and exits with the launcher's code. If the launcher exits on its own
 * before the model is ready, the demo exits non-zero.
 *
 * @module
 */

import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { buildLlamaServer } from "./llama_server.ts";
import { writeTinyModel } from "./tiny_model.ts";

const MOD = fileURLToPath(new URL("../mod.ts", import.meta.url));
const SHIPPED_CATALOGUE = fileURLToPath(
  new URL("../catalogue/", import.meta.url),
);
const MODEL = "tiny-llama";
const HOST = "localhost";
const ROOT_SUBDIRECTORIES = ["models", "logs", "metrics", "data"];
const READY_TIMEOUT_MS = 60_000;
const POLL_MS = 250;

const USAGE = `Usage: deno task demo [--port P] [--directory D] [--smoke]

Builds (or reuses) llama-server, writes the tiny random-weight model, and runs
the launcher for ${MODEL} in development mode until Ctrl-C.

  --port P         management port; the engine listens on P+1 (default 5000)
  --directory D    demo root directory, created if missing (default ./.demo)
  --smoke          after the model is ready, run one chat completion, stop
                   the launcher and exit with its code (for CI)
  -h, --help       print this help
`;

interface DemoOptions {
  port: number;
  directory: string;
  smoke: boolean;
}

interface ActiveModel {
  verb: string;
  url: string;
  healthy: boolean;
}

function say(line: string): void {
  console.error(`[demo] ${line}`);
}

/** Parses the command line; a string is a usage error to print. */
function parseDemoArgs(args: string[]): DemoOptions | "help" | string {
  let values;
  try {
    ({ values } = parseArgs({
      args,
      strict: true,
      options: {
        port: { type: "string", default: "5000" },
        directory: { type: "string", default: ".demo" },
        smoke: { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
    }));
  } catch (error) {
    return (error as Error).message.split("\n")[0] ?? "bad arguments";
  }
  if (values.help) return "help";
  const port = Number(values.port);
  if (!/^\d+$/.test(values.port) || port < 1 || port > 65534) {
    return `Cannot use --port ${values.port}: expected a port from 1 to 65534 (the engine takes the next one)`;
  }
  if (!values.directory) {
    return "Cannot use --directory: expected a non-empty path";
  }
  return { port, directory: resolve(values.directory), smoke: values.smoke };
}

function fileExists(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return false;
    throw error;
  }
}

/** Creates the root directory and writes the tiny model unless it is there. */
async function prepareRoot(root: string): Promise<void> {
  for (const sub of ROOT_SUBDIRECTORIES) {
    await Deno.mkdir(`${root}/${sub}`, { recursive: true });
  }
  const model = `${root}/models/${MODEL}/${MODEL}.gguf`;
  if (fileExists(model)) {
    say(`using the model at ${model}`);
  } else {
    await writeTinyModel(model);
    say(`wrote the tiny random-weight model to ${model}`);
  }
}

/**
 * The permissions the launcher child gets: what it needs for this demo, no
 * more, and nothing of crash safety left out (the same programs as
 * `deno task start` allows, minus the engines the demo does not run).
 */
export function launcherPermissions(root: string): string[] {
  return [
    `--allow-net=${HOST},127.0.0.1,[::1]`,
    "--allow-env",
    // `kill` signals the engine's process group under a narrowed --allow-run;
    // `sh` runs the watchdog and reads /proc (Deno wants --allow-all for it);
    // `prlimit` reads and raises the open-files limit.
    "--allow-run=llama-server,kill,sh,prlimit",
    `--allow-read=${root},${SHIPPED_CATALOGUE}`,
    `--allow-write=${root}`,
  ];
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * Polls `GET /models` until the model is healthy and returns its entry; or
 * says the launcher stopped running or the time ran out.
 */
async function waitHealthy(
  api: string,
  isRunning: () => boolean,
): Promise<ActiveModel | "exited" | "timeout"> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (!isRunning()) return "exited";
    try {
      const response = await fetch(`${api}/models`, {
        signal: AbortSignal.timeout(5_000),
      });
      if (response.ok) {
        const body = await response.json() as {
          active?: Record<string, ActiveModel>;
        };
        const entry = body.active?.[MODEL];
        if (entry?.healthy) return entry;
      } else {
        await response.body?.cancel();
      }
    } catch {
      // Not listening yet.
    }
    await sleep(POLL_MS);
  }
  return isRunning() ? "timeout" : "exited";
}

function printNextSteps(api: string, engine: string, apiKey: boolean): void {
  const auth = apiKey
    ? ` -H "authorization: Bearer $LOCAL_ENGINE_API_KEY"`
    : "";
  const body = JSON.stringify({
    model: MODEL,
    messages: [{ role: "user", content: "Hello" }],
    max_tokens: 16,
  });
  console.log(`
${MODEL} is ready. Its weights are random: the replies are gibberish, but the
protocol is the real OpenAI-compatible one of llama-server. Try:

  curl ${api}/health
  curl ${api}/models
  curl ${engine}/chat/completions -H 'content-type: application/json'${auth} -d '${body}'

Press Ctrl-C to stop the launcher and its engine.
`);
}

/** One chat completion against the engine; prints it and returns whether it worked. */
async function smokeCompletion(
  engine: string,
  apiKey: string,
): Promise<boolean> {
  const response = await fetch(`${engine}/chat/completions`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}),
    },
    body: JSON.stringify({
      model: MODEL,
      messages: [{ role: "user", content: "Hello" }],
      max_tokens: 16,
    }),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await response.text();
  let reply: {
    object?: string;
    choices?: { message?: { content?: unknown } }[];
  };
  try {
    reply = JSON.parse(text);
  } catch {
    reply = {};
  }
  const content = reply.choices?.[0]?.message?.content;
  if (
    response.status !== 200 || reply.object !== "chat.completion" ||
    typeof content !== "string"
  ) {
    say(`the chat completion failed: HTTP ${response.status} ${text}`);
    return false;
  }
  console.log(`smoke: ${MODEL} replied ${JSON.stringify(content)}`);
  return true;
}

/** True when something accepts connections on the port, by either loopback name. */
async function anyListening(port: number): Promise<boolean> {
  for (const hostname of ["127.0.0.1", HOST]) {
    try {
      (await Deno.connect({ hostname, port })).close();
      return true;
    } catch {
      // Not here.
    }
  }
  return false;
}

function exitCode(status: Deno.CommandStatus): number {
  if (status.code !== 0) return status.code;
  return status.signal ? 1 : 0;
}

async function main(args: string[]): Promise<number> {
  const parsed = parseDemoArgs(args);
  if (parsed === "help") {
    console.log(USAGE);
    return 0;
  }
  if (typeof parsed === "string") {
    console.error(`demo: ${parsed}\n\n${USAGE}`);
    return 2;
  }
  const { port, directory: root, smoke } = parsed;

  say("step 1/3: llama-server");
  const llamaServer = await buildLlamaServer();
  const binDir = llamaServer.slice(0, llamaServer.lastIndexOf("/"));

  say(`step 2/3: the demo root ${root}`);
  await prepareRoot(root);

  say(
    `step 3/3: the launcher for ${MODEL} on port ${port} (engine on ${
      port + 1
    })`,
  );
  const apiKey = Deno.env.get("LOCAL_ENGINE_API_KEY") ?? "";
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      ...launcherPermissions(root),
      MOD,
      MODEL,
      "--directory",
      root,
      "--dev_mode",
      "--host",
      HOST,
      "--port",
      String(port),
    ],
    env: {
      PATH: `${binDir}:${Deno.env.get("PATH") ?? ""}`,
      // The flags above decide; keep stray settings from failing the start.
      MY_LOCAL: root,
      NUCLEUS_PORT: String(port),
    },
    stdin: "null",
    stdout: "inherit",
    stderr: "inherit",
  }).spawn();

  let status: Deno.CommandStatus | undefined;
  const exited = child.status.then((s) => status = s);
  function stop(signal: Deno.Signal): void {
    if (status) return;
    try {
      child.kill(signal);
    } catch {
      // It has just exited.
    }
  }
  let interrupted = false;
  const signals: Deno.Signal[] = ["SIGINT", "SIGTERM"];
  const onSignal: Record<string, () => void> = {};
  for (const signal of signals) {
    onSignal[signal] = () => {
      interrupted = true;
      // Ctrl-C already reached the launcher (same process group); `kill <pid>`
      // reached only us. Pass it on: the launcher treats a copy arriving within
      // its duplicate window as the same request, not an impatient second one.
      stop(signal);
    };
    Deno.addSignalListener(signal, onSignal[signal]);
  }

  try {
    const api = `http://${HOST}:${port}`;
    say(
      `waiting up to ${READY_TIMEOUT_MS / 1000} s for ${MODEL} to be healthy`,
    );
    const ready = await waitHealthy(api, () => !status && !interrupted);
    if (ready === "exited" || ready === "timeout") {
      if (ready === "timeout") {
        say(
          `${MODEL} was not healthy after ${
            READY_TIMEOUT_MS / 1000
          } s: stopping the launcher`,
        );
        stop("SIGTERM");
      }
      await exited;
      const code = exitCode(status as Deno.CommandStatus);
      if (interrupted) return code;
      say(
        `the launcher exited before ${MODEL} was ready (code ${code}); see the launcher's log above (the engine's, if it started: ${root}/logs/${MODEL}.log)`,
      );
      return code || 1;
    }

    if (!smoke) {
      printNextSteps(api, ready.url, apiKey !== "");
      await exited;
      const code = exitCode(status as Deno.CommandStatus);
      say(`the launcher exited with code ${code}`);
      return code;
    }

    const ok = await smokeCompletion(ready.url, apiKey);
    say("smoke: stopping the launcher (SIGTERM)");
    stop("SIGTERM");
    await exited;
    const code = exitCode(status as Deno.CommandStatus);
    say(`smoke: the launcher exited with code ${code}`);
    if (await anyListening(port + 1)) {
      say(`smoke: something still listens on the engine port ${port + 1}`);
      return 1;
    }
    if (!ok) return 1;
    return code;
  } finally {
    // On an unexpected error too: never leave the launcher and its engine behind.
    if (!status) {
      stop("SIGTERM");
      await exited;
    }
    for (const signal of signals) {
      const listener = onSignal[signal];
      if (listener) Deno.removeSignalListener(signal, listener);
    }
  }
}

if (import.meta.main) {
  try {
    Deno.exit(await main(Deno.args));
  } catch (error) {
    console.error(
      `demo: ${error instanceof Error ? error.message : String(error)}`,
    );
    Deno.exit(1);
  }
}
