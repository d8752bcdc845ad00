// Read by `parseCli`, printed by `--help`, checked against the docs by the tests.
import { parsePort } from "../common/settings.ts";
import { RESTART_POLICIES } from "../catalogue/model_card.ts";
import { parseGpuList } from "../gpu/detect.ts";
import { SEMIOSERVE_DEFAULTS, type SemioserveOptions } from "./config.ts";

export type CliOptions =
  & Omit<
    SemioserveOptions,
    "pollTimeoutMs" | "stableAfterMs" | "signal" | "handleSignals" | "onListen"
  >
  & { help: boolean; version?: boolean; dryRun?: boolean; json?: boolean };

type OptionOf<T> = {
  [K in keyof CliOptions]-?: NonNullable<CliOptions[K]> extends T ? K
    : never;
}[keyof CliOptions];

interface FlagBase {
  /** As typed, without `--`: its option in kebab case, seconds without `Ms` (graceMs is --grace). */
  readonly name: string;
  /** One sentence for `--help`, the default left out. */
  readonly help: string;
  /** Said after the default in `--help`. */
  readonly defaultNote?: string;
  /** What `--help` writes after `--<name>`: ` SECONDS`, ` N`, `[=BOOL]`, a placeholder. */
  readonly arg: string;
}

/** Seconds on the command line (milliseconds in the options), or a count. */
interface NumberFlag extends FlagBase {
  readonly unit: "seconds" | "count";
  readonly option: Extract<keyof typeof SEMIOSERVE_DEFAULTS, OptionOf<number>>;
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
interface TextFlag extends FlagBase {
  readonly unit: "text";
  readonly option: Exclude<keyof CliOptions, "models" | "help" | "version">;
  readonly parse?: (text: string) => unknown;
}

export type CliFlag = (NumberFlag | BooleanFlag | TextFlag) & {
  readonly group: FlagGroup;
};

type Unnamed<F> = Omit<F, "option" | "name">;

/** A row of the table: the flag without its option, which is the row's key. */
type Row<K> = K extends NumberFlag["option"] ? Unnamed<NumberFlag>
  : K extends BooleanFlag["option"] ? Unnamed<BooleanFlag>
  : Unnamed<TextFlag>;

function seconds(min: number, help: string): Unnamed<NumberFlag> {
  return { unit: "seconds", arg: " SECONDS", min, help };
}

function count(min: number, help: string): Unnamed<NumberFlag> {
  return { unit: "count", arg: " N", min, help };
}

function toggle(help: string): Unnamed<BooleanFlag> {
  return { unit: "boolean", arg: "", help };
}

function text(
  arg: string,
  help: string,
  parse?: (text: string) => unknown,
): Unnamed<TextFlag> {
  return { unit: "text", arg: ` ${arg}`, help, ...parse ? { parse } : {} };
}

/** Every flag but `--help` and `--version`, by `--help` section and by option, in its order. */
const SECTIONS = {
  Required: {
    directory: text(
      "D",
      "root holding models/ logs/ metrics/ data/ (required unless env MY_LOCAL names it)",
    ),
  },
  Models: {
    catalogue: text(
      "FILE",
      "catalogue YAML, a path or URL (default: the catalogue shipped with the package)",
    ),
  },
  Checks: {
    dryRun: toggle(
      "run every check a start runs (directory, catalogue, models, ${NAME}, executables, weights, GPU placement, TLS and secrets, ports), print the plan (engines, command lines, GPUs, warnings) and exit: 0 when a start would proceed, 1 with the start's error; starts nothing, writes nothing",
    ),
    json: toggle("with --dry-run: the plan as one JSON object on stdout"),
  },
  "API and connections": {
    host: text(
      "H",
      "host of the API and every engine (env NUCLEUS_HOST, else localhost)",
    ),
    port: text(
      "P",
      "management port (env NUCLEUS_PORT, else 5000)",
      (text) => parsePort(text, "--port"),
    ),
    dev_mode: {
      ...toggle(
        'development mode, no authentication (default: env NUCLEUS_MODE starts with "dev"; unset, it is dev; set but empty, production). Alias --dev-mode; --dev_mode=false or --no-dev_mode forces production mode',
      ),
      negatable: true,
      arg: "[=BOOL]",
    },
    headerTimeoutMs: seconds(
      0.001,
      "an API connection that has not sent a complete request head (TLS handshake included) in this time is closed",
    ),
    idleTimeoutMs: seconds(0.001, "an API connection idle this long is closed"),
    maxConnections: {
      ...count(1, "API connections open at once; more are closed at once"),
      defaultNote: ", lowered to what the open-files limit leaves room for",
    },
  },
  GPUs: {
    gpus: text(
      "LIST",
      "devices to hand out: 0-7, 0,2,4-5, GPU-<uuid> entries, or none (default: the launcher's CUDA_VISIBLE_DEVICES, else nvidia-smi's devices, else no placement)",
      (text) => {
        parseGpuList(text, "--gpus");
        return text;
      },
    ),
    gpuReleaseTimeoutMs: seconds(
      0,
      "before a restart, how long to wait for the dead run's GPU memory to be released (nvidia-smi no longer listing its pids); then a warning and the start proceeds",
    ),
  },
  Supervision: {
    restart: text(
      "POLICY",
      "on-failure | always | never: when an engine that ended is started again; a card's restart: field wins",
      (text) => {
        if (!(RESTART_POLICIES as readonly string[]).includes(text)) {
          const policies = RESTART_POLICIES.join(", ");
          throw new Error(
            `Cannot use --restart=${text}: expected one of ${policies}`,
          );
        }
        return text;
      },
    ),
    restartMaxDelayMs: seconds(
      1,
      "cap of the restart delay, 1 s doubling per restart",
    ),
    failedRetryMs: seconds(
      0,
      "a failed engine is tried again after this long, its command line resolved anew; a card's failed_retry: field wins; 0 turns this off",
    ),
    healthIntervalMs: seconds(0.1, "background /health poll of every engine"),
    livenessFailures: count(
      0,
      "failed polls in a row, after a first 200, that restart an engine; 0 turns this off",
    ),
    startTimeoutMs: seconds(
      0,
      "a run that has not answered its first 200 and has written no output for this long is stopped and the restart policy applies; 0 turns this off",
    ),
    stallTimeoutMs: seconds(
      0,
      "a ready engine with requests running whose counters (tokens, or the kind's per-step counter) have not moved for this long is stopped as stalled and the restart policy applies; a card's stall_timeout wins; 0 turns this off",
    ),
    canaryIntervalMs: seconds(
      0,
      "a ready engine with nothing running and no counter moving for this long gets one cheap request (a canary); two failures in a row with no counter moving between them: stalled (a 501 is an answer); a card's canary: false, or an engine set to sleep when idle, gets none; 0 turns this off",
    ),
    canaryTimeoutMs: seconds(
      0.001,
      "how long a canary request may take before it counts as failed",
    ),
    graceMs: seconds(
      0,
      "time engines get between SIGTERM and SIGKILL at shutdown",
    ),
    drainTimeoutMs: seconds(
      0,
      "before a reload restarts an engine and at shutdown, wait at most this long for a ready engine's requests in flight (read from its metrics) before SIGTERM; a card's drain_timeout wins; 0 turns this off",
    ),
  },
  Logs: {
    logMaxBytes: count(1, "rotate logs/<name>.log past this size"),
    logKeep: count(0, "rotated files kept as <name>.log.1 ... <name>.log.N"),
  },
} satisfies Record<
  string,
  { readonly [K in TextFlag["option"]]?: Row<K> }
>;

export type FlagGroup = keyof typeof SECTIONS;

/** The flags of every section, each naming its section. */
export const CLI_FLAGS: readonly CliFlag[] = Object.entries(SECTIONS).flatMap(
  ([group, rows]) =>
    Object.entries(rows).map(([option, row]) => {
      const dash = (letter: string) => `-${letter.toLowerCase()}`;
      const name = option.replace(/Ms$/, "").replace(/[A-Z]/g, dash);
      return { ...row, name, option, group } as CliFlag;
    }),
);

/** A default as the command line spells it. */
export function shownDefault(flag: CliFlag): string | undefined {
  const value = (SEMIOSERVE_DEFAULTS as Record<string, unknown>)[flag.option];
  if (value === undefined) return undefined;
  return String(flag.unit === "seconds" ? (value as number) / 1000 : value);
}

/** A longer `--flag ARG` puts its help on the next line. */
const HELP_COLUMN = 23;
const WIDTH = 90;

/** Lines of at most `width`, broken at spaces; a longer word stands alone. */
function wrap(text: string, width: number): string[] {
  return text.match(new RegExp(`\\S.{0,${width - 1}}(?= |$)|\\S+`, "g"))!;
}

export function helpFor(group: FlagGroup): string {
  const indent = " ".repeat(HELP_COLUMN);
  return CLI_FLAGS.filter((flag) => flag.group === group).map((flag) => {
    const head = `  --${flag.name}${flag.arg}`;
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
