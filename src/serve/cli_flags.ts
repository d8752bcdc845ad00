/**
 * The launcher's flags as one table: `parseCli` reads through it, `--help`
 * prints it, the tests check the docs against it.
 *
 * @module
 */
import { parsePort } from "../common/settings.ts";
import { RESTART_POLICIES } from "../catalogue/model_card.ts";
import { parseGpuList } from "../gpu/detect.ts";
import { SEMIOSERVE_DEFAULTS, type SemioserveOptions } from "./config.ts";

type D = typeof SEMIOSERVE_DEFAULTS;

/** What the command line asks for. */
export type CliOptions =
  & Omit<
    SemioserveOptions,
    | "models"
    | "catalogue"
    | "pollTimeoutMs"
    | "stableAfterMs"
    | "signal"
    | "handleSignals"
    | "onListen"
  >
  & {
    models: string[];
    catalogue?: string;
    help: boolean;
    version?: boolean;
    dryRun?: boolean;
    json?: boolean;
  };

type NumberDefault = {
  [K in keyof D]: D[K] extends number ? K : never;
}[keyof D];

type OptionOf<T> = {
  [K in keyof CliOptions]-?: NonNullable<CliOptions[K]> extends T ? K
    : never;
}[keyof CliOptions];

interface FlagBase {
  /** Without `--`. */
  readonly name: string;
  /** One sentence for `--help`, the default left out. */
  readonly help: string;
  /** Said after the default in `--help`. */
  readonly defaultNote?: string;
}

/**
 * Seconds on the command line (milliseconds in the options), or a count; the
 * default is the option's in {@linkcode SEMIOSERVE_DEFAULTS}.
 */
export interface NumberFlag extends FlagBase {
  readonly unit: "seconds" | "count";
  readonly option: Extract<NumberDefault, OptionOf<number>>;
  /** In the command line's unit. */
  readonly min: number;
}

/** A negatable switch also takes `--no-<name>` and `=BOOL`; `-`/`_` are interchangeable. */
export interface BooleanFlag extends FlagBase {
  readonly unit: "boolean";
  readonly option: Exclude<OptionOf<boolean>, "help" | "version">;
  readonly negatable?: boolean;
}

/** A value `parse` checks (one line when bad) and converts. */
export interface TextFlag extends FlagBase {
  readonly unit: "text";
  readonly option: Exclude<keyof CliOptions, "models" | "help" | "version">;
  /** The placeholder in `--help`. */
  readonly arg: string;
  readonly parse?: (text: string) => unknown;
}

type FlagEntry = NumberFlag | BooleanFlag | TextFlag;

export type CliFlag = FlagEntry & { readonly group: FlagGroup };

/** Every flag but `--help` and `--version`, by `--help` section, in its order. */
const SECTIONS = {
  Required: [
    {
      name: "directory",
      unit: "text",
      option: "directory",
      arg: "D",
      help:
        "root holding models/ logs/ metrics/ data/ (required unless env MY_LOCAL names it)",
    },
  ],
  Models: [
    {
      name: "catalogue",
      unit: "text",
      option: "catalogue",
      arg: "FILE",
      help:
        "catalogue YAML, a path or URL (default: the catalogue shipped with the package)",
    },
  ],
  Checks: [
    {
      name: "dry-run",
      unit: "boolean",
      option: "dryRun",
      help:
        "run every check a start runs (directory, catalogue, models, ${NAME}, executables, weights, GPU placement, TLS and secrets, ports), print the plan (engines, command lines, GPUs, warnings) and exit: 0 when a start would proceed, 1 with the start's error; starts nothing, writes nothing",
    },
    {
      name: "json",
      unit: "boolean",
      option: "json",
      help: "with --dry-run: the plan as one JSON object on stdout",
    },
  ],
  "API and connections": [
    {
      name: "host",
      unit: "text",
      option: "host",
      arg: "H",
      help:
        "host of the API and every engine (env NUCLEUS_HOST, else localhost)",
    },
    {
      name: "port",
      unit: "text",
      option: "port",
      arg: "P",
      parse: (text) => parsePort(text, "--port"),
      help: "management port (env NUCLEUS_PORT, else 5000)",
    },
    {
      name: "dev_mode",
      unit: "boolean",
      option: "dev_mode",
      negatable: true,
      help:
        'development mode, no authentication (default: env NUCLEUS_MODE starts with "dev"; NUCLEUS_MODE defaults to dev). Alias --dev-mode; --dev_mode=false or --no-dev_mode forces production mode',
    },
    {
      name: "header-timeout",
      unit: "seconds",
      option: "headerTimeoutMs",
      min: 0.001,
      help:
        "an API connection that has not sent a complete request head (TLS handshake included) in this time is closed",
    },
    {
      name: "idle-timeout",
      unit: "seconds",
      option: "idleTimeoutMs",
      min: 0.001,
      help: "an API connection idle this long is closed",
    },
    {
      name: "max-connections",
      unit: "count",
      option: "maxConnections",
      min: 1,
      defaultNote: ", lowered to what the open-files limit leaves room for",
      help: "API connections open at once; more are closed at once",
    },
  ],
  GPUs: [
    {
      name: "gpus",
      unit: "text",
      option: "gpus",
      arg: "LIST",
      parse: (text) => {
        parseGpuList(text, "--gpus");
        return text;
      },
      help:
        "devices to hand out: 0-7, 0,2,4-5, GPU-<uuid> entries, or none (default: the launcher's CUDA_VISIBLE_DEVICES, else nvidia-smi's devices, else no placement)",
    },
    {
      name: "gpu-release-timeout",
      unit: "seconds",
      option: "gpuReleaseTimeoutMs",
      min: 0,
      help:
        "before a restart, how long to wait for the dead run's GPU memory to be released (nvidia-smi no longer listing its pids); then a warning and the start proceeds",
    },
  ],
  Supervision: [
    {
      name: "restart",
      unit: "text",
      option: "restart",
      arg: "POLICY",
      parse: (text) => {
        if (!(RESTART_POLICIES as readonly string[]).includes(text)) {
          throw new Error(
            `Cannot use --restart=${text}: expected one of ${
              RESTART_POLICIES.join(", ")
            }`,
          );
        }
        return text;
      },
      help:
        "on-failure | always | never: when an engine that ended is started again; a card's restart: field wins",
    },
    {
      name: "restart-max-delay",
      unit: "seconds",
      option: "restartMaxDelayMs",
      min: 1,
      help: "cap of the restart delay, 1 s doubling per restart",
    },
    {
      name: "failed-retry",
      unit: "seconds",
      option: "failedRetryMs",
      min: 0,
      help:
        "a failed engine is tried again after this long, its command line resolved anew; a card's failed_retry: field wins; 0 turns this off",
    },
    {
      name: "health-interval",
      unit: "seconds",
      option: "healthIntervalMs",
      min: 0.1,
      help: "background /health poll of every engine",
    },
    {
      name: "liveness-failures",
      unit: "count",
      option: "livenessFailures",
      min: 0,
      help:
        "failed polls in a row, after a first 200, that restart an engine; 0 turns this off",
    },
    {
      name: "start-timeout",
      unit: "seconds",
      option: "startTimeoutMs",
      min: 0,
      help:
        "a run that has not answered its first 200 and has written no output for this long is stopped and the restart policy applies; 0 turns this off",
    },
    {
      name: "stall-timeout",
      unit: "seconds",
      option: "stallTimeoutMs",
      min: 0,
      help:
        "a ready engine with requests running whose token counters have not moved for this long is stopped as stalled and the restart policy applies; a card's stall_timeout wins; 0 turns this off",
    },
    {
      name: "canary-interval",
      unit: "seconds",
      option: "canaryIntervalMs",
      min: 0,
      help:
        "a ready engine with nothing running and no counter moving for this long gets one cheap request (a canary); two failures in a row: stalled; a card's canary: false, or an engine set to sleep when idle, gets none; 0 turns this off",
    },
    {
      name: "canary-timeout",
      unit: "seconds",
      option: "canaryTimeoutMs",
      min: 0.001,
      help: "how long a canary request may take before it counts as failed",
    },
    {
      name: "grace",
      unit: "seconds",
      option: "graceMs",
      min: 0,
      help: "time engines get between SIGTERM and SIGKILL at shutdown",
    },
    {
      name: "drain-timeout",
      unit: "seconds",
      option: "drainTimeoutMs",
      min: 0,
      help:
        "before a reload restarts an engine and at shutdown, wait at most this long for a ready engine's requests in flight (read from its metrics) before SIGTERM; a card's drain_timeout wins; 0 turns this off",
    },
  ],
  Logs: [
    {
      name: "log-max-bytes",
      unit: "count",
      option: "logMaxBytes",
      min: 1,
      help: "rotate logs/<name>.log past this size",
    },
    {
      name: "log-keep",
      unit: "count",
      option: "logKeep",
      min: 0,
      help: "rotated files kept as <name>.log.1 ... <name>.log.N",
    },
  ],
} satisfies Record<string, readonly FlagEntry[]>;

export type FlagGroup = keyof typeof SECTIONS;

/** The flags of every section, each naming its section. */
export const CLI_FLAGS: readonly CliFlag[] = Object.entries(SECTIONS).flatMap(
  ([group, flags]) =>
    flags.map((flag: FlagEntry) => ({ ...flag, group: group as FlagGroup })),
);

function argOf(flag: FlagEntry): string {
  switch (flag.unit) {
    case "seconds":
      return " SECONDS";
    case "count":
      return " N";
    case "boolean":
      return flag.negatable ? "[=BOOL]" : "";
    case "text":
      return ` ${flag.arg}`;
  }
}

/** A default as the command line spells it. */
export function shownDefault(flag: FlagEntry): string | undefined {
  const value = (SEMIOSERVE_DEFAULTS as Record<string, unknown>)[flag.option];
  if (value === undefined) return undefined;
  return String(flag.unit === "seconds" ? (value as number) / 1000 : value);
}

/** A longer `--flag ARG` puts its help on the next line. */
const HELP_COLUMN = 23;
const WIDTH = 90;

function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = "";
  for (const word of text.split(" ")) {
    if (line && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  return [...lines, line];
}

/** The `--help` entries of one section. */
export function helpFor(group: FlagGroup): string {
  const indent = " ".repeat(HELP_COLUMN);
  return SECTIONS[group].map((flag: FlagEntry) => {
    const head = `  --${flag.name}${argOf(flag)}`;
    const shown = shownDefault(flag);
    // The default's own words stay on one line (NBSP while wrapping).
    const text = shown === undefined
      ? flag.help
      : `${flag.help} (default\u00a0${shown}${flag.defaultNote ?? ""})`;
    const lines = wrap(text, WIDTH - HELP_COLUMN).map((l) =>
      indent + l.replaceAll("\u00a0", " ")
    );
    if (head.length + 2 <= HELP_COLUMN) {
      lines[0] = head.padEnd(HELP_COLUMN) + lines[0]!.trimStart();
    } else lines.unshift(head);
    return lines.join("\n");
  }).join("\n");
}
