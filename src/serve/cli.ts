/**
 * The command line: flags in, launcher options out. Usage errors are one line
 * and exit code 2.
 *
 * Folder `serve/`: the launcher's own parts that `serve.ts` composes: the
 * command line, its options, the start-up checks, reload. `serve` is the only
 * room that knows every other; every other room knows nothing of it.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { parsePort } from "../common.ts";
import { RESTART_POLICIES, type RestartPolicy } from "../catalogue.ts";
import type { SemioserveOptions } from "./options.ts";
import { parseGpuList } from "../gpu/detect.ts";
import { closeMatches } from "../common/close_matches.ts";

/** A command line that cannot be used. */
export class UsageError extends Error {
  /** @param message One line naming the input and what was expected. */
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** What the command line asks for; unset fields fall back to the environment. */
export type CliOptions =
  & Pick<
    SemioserveOptions,
    | "host"
    | "port"
    | "dev_mode"
    | "directory"
    | "graceMs"
    | "restart"
    | "restartMaxDelayMs"
    | "healthIntervalMs"
    | "livenessFailures"
    | "logMaxBytes"
    | "logKeep"
    | "gpus"
    | "headerTimeoutMs"
    | "idleTimeoutMs"
    | "maxConnections"
    | "gpuReleaseTimeoutMs"
    | "startTimeoutMs"
  >
  & {
    models: string[];
    /** A path or URL, as typed. */
    catalogue?: string;
    help: boolean;
  };

/** The text `--help` prints. */
export const USAGE = `Usage:
  deno run -A jsr:@mymodel/serve <model> [<model> ...] --directory D [options]
  deno task start <model> [<model> ...] [options]    (in a checkout; MY_LOCAL=D set)

Starts one inference engine per catalogue model (ports --port+1, --port+2, ...)
and serves GET /health and GET /models on --port, until Ctrl-C or SIGTERM.

Required:
  <model>              a catalogue name, or <VERB>:<name> (e.g. CHAT:llama-3)
  --directory D        root holding models/ logs/ metrics/ data/ (required unless
                       env MY_LOCAL names it)

Example:
  mkdir -p /srv/mymodel/models /srv/mymodel/logs /srv/mymodel/metrics /srv/mymodel/data
  deno run -A jsr:@mymodel/serve llama-3 --directory /srv/mymodel --port 5000

Models:
  --catalogue FILE     catalogue YAML, a path or URL (default: the catalogue shipped
                       with the package)

API and connections:
  --host H             host of the API and every engine (env NUCLEUS_HOST, else localhost)
  --port P             management port (env NUCLEUS_PORT, else 5000)
  --dev_mode[=BOOL]    development mode, no authentication (default: env NUCLEUS_MODE
                       starts with "dev"; NUCLEUS_MODE defaults to dev). Alias --dev-mode;
                       --dev_mode=false or --no-dev_mode forces production mode
  --header-timeout SECONDS
                       an API connection that has not sent a complete request head
                       (TLS handshake included) in this time is closed (default 10)
  --idle-timeout SECONDS
                       an API connection idle this long is closed (default 120)
  --max-connections N  API connections open at once; more are closed at once (default
                       1024, lowered to what the open-files limit leaves room for)

GPUs:
  --gpus LIST          devices to hand out: 0-7, 0,2,4-5, GPU-<uuid> entries, or none
                       (default: the launcher's CUDA_VISIBLE_DEVICES, else nvidia-smi's
                       devices, else no placement)
  --gpu-release-timeout SECONDS
                       before a restart, how long to wait for the dead run's GPU memory to
                       be released (nvidia-smi no longer listing its pids); then a warning
                       and the start proceeds (default 30)

Supervision:
  --restart POLICY     on-failure | always | never: when an engine that ended is started
                       again; a card's restart: field wins (default on-failure)
  --restart-max-delay SECONDS
                       cap of the restart delay, 1 s doubling per restart (default 300)
  --health-interval SECONDS
                       background /health poll of every engine (default 10)
  --liveness-failures N
                       failed polls in a row, after a first 200, that restart an engine;
                       0 turns this off (default 6)
  --start-timeout SECONDS
                       a run that has not answered its first 200 and has written no output
                       for this long is stopped and the restart policy applies; 0 turns
                       this off (default 900)
  --grace SECONDS      time engines get between SIGTERM and SIGKILL at shutdown (default 10)

Logs (engine output in <directory>/logs/<model>.log):
  --log-max-bytes N    rotate logs/<name>.log past this size (default 104857600)
  --log-keep N         rotated files kept as <name>.log.1 ... <name>.log.N (default 5)

  -h, --help           print this help and exit

Exit codes:
  0  stopped cleanly (SIGTERM or SIGINT)
  1  start-up failed (one line on stderr says why)
  2  usage error (an unknown flag or a bad value)

Signals: SIGTERM or SIGINT stops every engine, then the launcher; SIGHUP reloads
the catalogue, the TLS pair and the *_FILE secrets without touching unchanged
engines. The engines' state: deno run -A jsr:@mymodel/serve/status (or
deno task status in a checkout).
`;

/** Every flag the launcher takes, as `node:util` parseArgs wants them. */
const FLAGS = {
  host: { type: "string" },
  port: { type: "string" },
  dev_mode: { type: "boolean" },
  "no-dev_mode": { type: "boolean" },
  directory: { type: "string" },
  catalogue: { type: "string" },
  grace: { type: "string" },
  restart: { type: "string" },
  "restart-max-delay": { type: "string" },
  "health-interval": { type: "string" },
  "liveness-failures": { type: "string" },
  "log-max-bytes": { type: "string" },
  "log-keep": { type: "string" },
  gpus: { type: "string" },
  "header-timeout": { type: "string" },
  "idle-timeout": { type: "string" },
  "max-connections": { type: "string" },
  "gpu-release-timeout": { type: "string" },
  "start-timeout": { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

/** The long flags, as typed (`--port`), for "did you mean" suggestions. */
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

/** Folds the dev-mode spellings into `--dev_mode` / `--no-dev_mode`. */
function normalizeDevMode(args: readonly string[]): string[] {
  const out: string[] = [];
  for (const arg of args) {
    if (arg === "--") {
      out.push(...args.slice(args.indexOf(arg)));
      break;
    }
    const match = /^--(no-)?dev[-_]mode(?:=(.*))?$/.exec(arg);
    if (!match) {
      out.push(arg);
      continue;
    }
    const [, negated, value] = match;
    if (value === undefined) {
      out.push(negated ? "--no-dev_mode" : "--dev_mode");
      continue;
    }
    const lowered = value.toLowerCase();
    if (negated || (!TRUE.has(lowered) && !FALSE.has(lowered))) {
      throw new UsageError(
        `Cannot use ${arg}: expected --dev_mode, --dev_mode=true or --dev_mode=false`,
      );
    }
    out.push(TRUE.has(lowered) ? "--dev_mode" : "--no-dev_mode");
  }
  return out;
}

/** A number of seconds, at least `min`, as milliseconds. */
function seconds(flag: string, text: string, min: number): number {
  const value = Number(text);
  if (text.trim() === "" || !Number.isFinite(value) || value < min) {
    throw new UsageError(
      `Cannot use --${flag}=${text}: expected a number of seconds, ${min} or more`,
    );
  }
  return Math.round(value * 1000);
}

/** A whole number, at least `min`. */
function count(flag: string, text: string, min: number): number {
  const value = Number(text);
  if (
    !/^\s*\d+\s*$/.test(text) || !Number.isSafeInteger(value) || value < min
  ) {
    throw new UsageError(
      `Cannot use --${flag}=${text}: expected a whole number, ${min} or more`,
    );
  }
  return value;
}

/**
 * Parses the launcher's command line.
 *
 * @param args The arguments after the program name.
 * @returns The parsed options; `help` set when usage was asked for.
 * @throws {UsageError} On an unknown flag, a missing value or model, or a bad port.
 */
export function parseCli(args: readonly string[]): CliOptions {
  let parsed;
  try {
    parsed = parseArgs({
      args: normalizeDevMode(args),
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
    const unknown = /^Unknown option '([^']+)'/.exec(first ?? "")?.[1];
    throw new UsageError(
      `Cannot parse the command line: ${first}${
        unknown === undefined ? "" : flagHint(unknown)
      }`,
    );
  }
  const { values, positionals } = parsed;
  const options: CliOptions = { models: positionals, help: !!values.help };
  if (options.help) return options;
  if (positionals.length === 0) {
    throw new UsageError(
      "Cannot start: no model given (expected one or more catalogue names, e.g. llama-3)",
    );
  }
  for (const spec of positionals) {
    if (!spec.slice(spec.indexOf(":") + 1)) {
      throw new UsageError(
        `Cannot use model '${spec}': expected <name> or <VERB>:<name>`,
      );
    }
  }
  for (const key of ["host", "directory", "catalogue"] as const) {
    const value = values[key];
    if (value === "") {
      throw new UsageError(`Cannot use --${key}: expected a non-empty value`);
    }
    if (value !== undefined) options[key] = value;
  }
  if (values.port !== undefined) {
    try {
      options.port = parsePort(values.port, "--port");
    } catch (error) {
      throw new UsageError((error as Error).message);
    }
  }
  if (values.grace !== undefined) {
    options.graceMs = seconds("grace", values.grace, 0);
  }
  if (values.restart !== undefined) {
    if (!(RESTART_POLICIES as readonly string[]).includes(values.restart)) {
      throw new UsageError(
        `Cannot use --restart=${values.restart}: expected one of ${
          RESTART_POLICIES.join(", ")
        }`,
      );
    }
    options.restart = values.restart as RestartPolicy;
  }
  const delay = values["restart-max-delay"];
  if (delay !== undefined) {
    options.restartMaxDelayMs = seconds("restart-max-delay", delay, 1);
  }
  const interval = values["health-interval"];
  if (interval !== undefined) {
    options.healthIntervalMs = seconds("health-interval", interval, 0.1);
  }
  const failures = values["liveness-failures"];
  if (failures !== undefined) {
    options.livenessFailures = count("liveness-failures", failures, 0);
  }
  const maxBytes = values["log-max-bytes"];
  if (maxBytes !== undefined) {
    options.logMaxBytes = count("log-max-bytes", maxBytes, 1);
  }
  const keep = values["log-keep"];
  if (keep !== undefined) options.logKeep = count("log-keep", keep, 0);
  if (values.gpus !== undefined) {
    try {
      parseGpuList(values.gpus, "--gpus");
    } catch (error) {
      throw new UsageError((error as Error).message);
    }
    options.gpus = values.gpus;
  }
  const headerTimeout = values["header-timeout"];
  if (headerTimeout !== undefined) {
    options.headerTimeoutMs = seconds("header-timeout", headerTimeout, 0.001);
  }
  const idleTimeout = values["idle-timeout"];
  if (idleTimeout !== undefined) {
    options.idleTimeoutMs = seconds("idle-timeout", idleTimeout, 0.001);
  }
  const release = values["gpu-release-timeout"];
  if (release !== undefined) {
    options.gpuReleaseTimeoutMs = seconds("gpu-release-timeout", release, 0);
  }
  const startTimeout = values["start-timeout"];
  if (startTimeout !== undefined) {
    options.startTimeoutMs = seconds("start-timeout", startTimeout, 0);
  }
  const maxConnections = values["max-connections"];
  if (maxConnections !== undefined) {
    options.maxConnections = count("max-connections", maxConnections, 1);
  }
  if (values.dev_mode && values["no-dev_mode"]) {
    throw new UsageError(
      "Cannot use both --dev_mode and --no-dev_mode: expected one",
    );
  }
  if (values.dev_mode) options.dev_mode = true;
  if (values["no-dev_mode"]) options.dev_mode = false;
  return options;
}
