// One engine as a plain value (`JSON.stringify` round-trips it), resolved once
// from its card and the launcher's settings, and handed from the launcher's
// plan to the engine run and the spawn: no reader works a setting out again.
import type { ModelCard, RestartPolicy } from "../catalogue.ts";
import { dirname } from "node:path";
import { urlHost } from "../common/settings.ts";
import { EngineError } from "./engine_error.ts";
import { ENGINE_KINDS, executableOf } from "./kinds.ts";
import {
  SERVE_FLAGS,
  termDrains,
  type TrafficRule,
} from "./kinds/engine_kind.ts";
import { locateExecutable, resolveModel } from "./launch.ts";
import { trafficRule } from "./traffic.ts";
import { sleepArgs, sleepEnv } from "./sleep_after.ts";

export type EnginePlacement = EnginePlan["placement"];

const UNPLACED: EnginePlacement = {
  gpus: null,
  share: null,
  memoryNeed: null,
  env: {},
  args: [],
};

/** Where an engine runs: what its plan is made from besides its card. */
export interface EngineSite {
  /** Host the engine binds; also used to reach it. */
  host: string;
  /** Port the engine listens on. */
  port: number;
  /** Root directory: weights under `models/`, the log under `logs/`. */
  directory: string;
  /** API key the engine demands; empty for none. @default {""} */
  apiKey?: string;
  /** What the engine inherits (the launcher's environment less its secrets); its PATH finds the executable. */
  baseEnv: Readonly<Record<string, string>>;
  /** Its place on the GPUs. @default {not placed} */
  placement?: Partial<EnginePlan["placement"]>;
  /** The launcher's settings (ms; 0: off), which a card's own fields win over. @default {restart on failure; no retry, drain, stall rule or canary} */
  defaults?: {
    readonly restart: RestartPolicy;
    readonly failedRetryMs: number;
    readonly drainTimeoutMs: number;
    readonly stallTimeoutMs: number;
    readonly canaryIntervalMs: number;
  };
}

export type EngineDefaults = NonNullable<EngineSite["defaults"]>;

/** Without the launcher's. */
const OFF: EngineDefaults = {
  restart: "on-failure",
  failedRetryMs: 0,
  drainTimeoutMs: 0,
  stallTimeoutMs: 0,
  canaryIntervalMs: 0,
};

/** One engine as it will run: checked, printable, comparable; each per-card setting resolved once (ms; 0: off). */
export interface EnginePlan
  extends Readonly<Required<Omit<EngineSite, "defaults" | "placement">>> {
  /** When it starts again after it ended: the card's, else the launcher's. */
  readonly restart: RestartPolicy;
  /** A `failed` engine is tried again after this long. */
  readonly failedRetryMs: number;
  /** What a planned stop drains it at most (none without `traffic`). */
  readonly drainMs: number;
  /** Requests running and no token counted this long: stalled. */
  readonly stallMs: number;
  /** Idle this long: a canary request. */
  readonly canaryMs: number;
  /** Its SIGTERM is its own drain (the kind's `termDrain` flag set above 0 in the card's args). */
  readonly termDrains: boolean;
  /** @ignore The launcher's own plumbing: where and how its traffic is read (the kind's rule, else the card's `metrics`); null: not at all. */
  readonly traffic: TrafficRule | null;
  /** The catalogue name. */
  readonly name: string;
  /** The expanded card. */
  readonly card: ModelCard;
  /** Its OpenAI-compatible base URL, e.g. `http://localhost:5001/v1`. */
  readonly url: string;
  /** Where placement put it and what holds it there: a restart, a retry or a reload makes the same command line with it. */
  readonly placement: {
    /** Its devices, `[]` for none, null when not placed. */
    readonly gpus: readonly string[] | null;
    /** The share of each of its devices (1: whole), null when not placed. */
    readonly share: number | null;
    /** What it holds on each device (its budget, footprint or estimate; `mib` wins over `fraction` of the total), null when unknown. */
    readonly memoryNeed: {
      readonly fraction: number;
      readonly mib?: number;
      /** Where it comes from, e.g. `gpu-memory-utilization 0.9 (vLLM's default)`. */
      readonly from: string;
    } | null;
    /** Set over the card's `env`: `CUDA_VISIBLE_DEVICES`, `CUDA_DEVICE_ORDER`. */
    readonly env: Readonly<Record<string, string>>;
    /** Its kind's flags holding it to its budget, after the card's. */
    readonly args: readonly string[];
  };
  /** `<directory>/logs/<name>.log`. */
  readonly logFile: string;
  /** The executable run. */
  readonly executable: string;
  /** The weights it serves: a local path, else the hub id. */
  readonly model: string;
  /** Whether {@linkcode EnginePlan.model} is a local path. */
  readonly isLocal: boolean;
  /** Its arguments: its kind's command line, the card's args, its placement's. */
  readonly args: readonly string[];
  /** What the launcher adds to {@linkcode EnginePlan.baseEnv}: its compile caches, the card's `env`, then its placement's. */
  readonly env: Readonly<Record<string, string>>;
  /** The compile cache directories it was given (`<directory>/data/cache/<name>/…`), made before each spawn. */
  readonly caches: readonly string[];
}

/**
 * Resolves an engine's command line from its card: the executable (on the
 * site's PATH or by path) and the weights (local, else the hub id).
 *
 * @throws {EngineError} When the engine kind is unknown, the executable is
 *   missing, or neither local weights nor a hub id exist.
 *
 * @example
 * ```ts ignore
 * import { planEngine } from "@mymodel/serve/serve";
 *
 * const site = { host: "localhost", port: 5001, directory: "/srv/mymodel" };
 * const baseEnv = { PATH: "/usr/local/bin:/usr/bin:/bin" };
 * const plan = planEngine(card, { ...site, baseEnv });
 * console.log(plan.executable, plan.args.join(" "));
 * ```
 */
export function planEngine(card: ModelCard, site: EngineSite): EnginePlan {
  const engine = engineOf(card, site, resolveEngine(card, site));
  return { ...engine, ...engineSettings(card, site.defaults ?? OFF) };
}

/** The plan placed anew (pure): its command line and environment made again with `placement`. */
export function placed(
  plan: EnginePlan,
  placement: EnginePlacement,
): EnginePlan {
  return { ...plan, ...engineOf(plan.card, { ...plan, placement }, plan) };
}

/**
 * The plan's executable and weights resolved anew, its placement and settings
 * kept: a restart's and a retry's.
 *
 * @throws {EngineError} As {@linkcode planEngine}.
 */
export function replan(plan: EnginePlan): EnginePlan {
  const resolved = resolveEngine(plan.card, plan);
  return { ...plan, ...engineOf(plan.card, plan, resolved) };
}

type Resolved = Pick<EnginePlan, "executable" | "model" | "isLocal">;

/** The one place an engine's command line and environment are made: its card, site, placement, executable and weights. */
function engineOf(
  card: ModelCard,
  site: EngineSite,
  { executable, model, isLocal }: Resolved,
): Omit<EnginePlan, keyof EngineSettings> {
  const { host, port, directory, baseEnv, apiKey = "" } = site;
  const placement = { ...UNPLACED, ...site.placement };
  const caches = cacheEnv(card, site);
  const ctx = { model, isLocal, host, port, apiKey, card };
  const kind = ENGINE_KINDS[card.engine]!;
  const argv = [...kind.argv(ctx), ...sleepArgs(card, kind)];
  return {
    name: card.name,
    card,
    host,
    port,
    directory,
    apiKey,
    baseEnv,
    placement,
    executable,
    model,
    isLocal,
    url: `http://${urlHost(host)}:${port}/v1`,
    logFile: `${directory}/logs/${card.name}.log`,
    args: [...argv, ...placement.args],
    env: { ...caches, ...sleepEnv(card, kind), ...card.env, ...placement.env },
    caches: Object.values(caches),
  };
}

/**
 * A reload's change that does not reach the engine: the new card's settings
 * and `apiKey` (for its next start) over the running plan, no I/O.
 */
export function amendPlan(
  plan: EnginePlan,
  card: ModelCard,
  apiKey: string,
  defaults: EngineDefaults,
): EnginePlan {
  return { ...plan, card, apiKey, ...engineSettings(card, defaults) };
}

type EngineSettings = ReturnType<typeof engineSettings>;

/** "The card's value, else the launcher's", once for every setting. */
export function engineSettings(card: ModelCard, launcher: EngineDefaults) {
  const kind = ENGINE_KINDS[card.engine]!;
  const traffic = trafficRule(card, kind) ?? null;
  const ms = (seconds: number | undefined, otherwise: number) =>
    seconds === undefined ? otherwise : seconds * 1000;
  return {
    restart: card.restart ?? launcher.restart,
    failedRetryMs: ms(card.failedRetry, launcher.failedRetryMs),
    drainMs: ms(card.drainTimeout, launcher.drainTimeoutMs),
    stallMs: ms(card.stallTimeout, launcher.stallTimeoutMs),
    canaryMs: card.canary === false ? 0 : launcher.canaryIntervalMs,
    termDrains: termDrains(kind, card.args),
    traffic,
  };
}

/**
 * Why a compile cache of the plan cannot be used, in one line naming the card
 * and the path; undefined when each is, or can be made, a directory under the
 * root. The start checks it before making them, `--dry-run` shows it.
 *
 * @example `cacheProblem(plan)` is undefined on a fresh root; with a file at
 * `<root>/data/cache` it reads `alpha: <root>/data/cache is not a directory (…)`.
 */
export function cacheProblem(plan: EnginePlan): string | undefined {
  const root = Deno.realPathSync(plan.directory);
  const why = (dir: string): string | undefined => {
    // The deepest part that exists: a symlink on the way resolves out of the root.
    for (let at = dir; at.startsWith(`${plan.directory}/`); at = dirname(at)) {
      let real: string;
      try {
        real = Deno.realPathSync(at);
      } catch (error) {
        const missing = error instanceof Deno.errors.NotFound ||
          error instanceof Deno.errors.NotADirectory;
        if (missing) continue;
        return `${at} cannot be read (${(error as Error).message})`;
      }
      if (!real.startsWith(`${root}/`)) {
        return `${at} leads out of the root to ${real}`;
      }
      return Deno.statSync(real).isDirectory
        ? undefined
        : `${at} is not a directory`;
    }
    return undefined;
  };
  const problem = plan.caches.map(why).find(Boolean);
  return problem &&
    `${plan.name}: ${problem} (expected a directory under ${plan.directory}/data/cache)`;
}

// Per card: two engines started at once never write one cache.
function cacheEnv(card: ModelCard, site: EngineSite): Record<string, string> {
  const caches = Object.entries(ENGINE_KINDS[card.engine]?.caches ?? {});
  const dir = `${site.directory}/data/cache/${card.name}`;
  return Object.fromEntries(
    caches.filter(([key]) => !(key in card.env) && !(key in site.baseEnv))
      .map(([key, sub]) => [key, `${dir}/${sub}`]),
  );
}

/** The executable on the site's PATH (or by path) and the weights: a spawn's I/O, done again at each restart. */
function resolveEngine(card: ModelCard, site: EngineSite): Resolved {
  const kind = ENGINE_KINDS[card.engine];
  const cannot = `Cannot prepare ${card.name}`;
  if (!kind) {
    throw new EngineError(`${cannot}: unknown engine '${card.engine}'`);
  }
  const owned = kind.ownedFlags && [...SERVE_FLAGS, ...kind.ownedFlags];
  const set = card.args.map((arg) => arg.replace(/=.*$/, "")).find((flag) =>
    owned?.includes(flag.replace(/^--.*/, (long) => long.replaceAll("_", "-")))
  );
  if (set !== undefined) {
    const none = `expected none of ${owned!.join(", ")} in args`;
    throw new EngineError(
      `${cannot}: card '${card.name}', field 'args' sets ${set}, which the launcher sets (${none}: the launcher passes --host, --port, the card's name, the key of LOCAL_ENGINE_API_KEY and its local or hub)`,
    );
  }
  const knob = card.gpuMemory && card.args.map((a) => a.replace(/=.*$/, ""))
    .find((flag) => kind.sizing?.knobs.includes(flag.replaceAll("_", "-")));
  if (knob) {
    const its = kind.sizing!.knobs.join(", ");
    throw new EngineError(
      `${cannot}: card '${card.name}' sets both gpu_memory and ${knob} in args (expected one of them: gpu_memory sets ${its} itself)`,
    );
  }
  sleepArgs(card, kind); // its refusal comes before the executable's
  const executable = executableOf(card, kind);
  const found = executable
    ? locateExecutable(executable, site.baseEnv.PATH)
    : { found: false };
  if (!found.found) {
    throw new EngineError(
      found.why
        ? `${cannot}: the ${card.engine} engine's executable ${found.why} (expected an executable file: set the card's executable to one, or chmod +x it)`
        : `${cannot}: the ${card.engine} engine's executable '${executable}' is not on PATH (${kind.install}, or set the card's executable)`,
    );
  }
  return { executable, ...resolveModel(card, kind, site.directory) };
}

/**
 * Why `key` would reach this card's engine as other keys (its kind reads
 * `--api-key` as a list), or undefined.
 *
 * @example
 * ```ts ignore
 * keySplit(llamaCard, "a,b"); // "holds ',' (expected a key without ',', ...)"
 * ```
 */
export function keySplit(card: ModelCard, key: string): string | undefined {
  const kind = ENGINE_KINDS[card.engine];
  const list = kind?.apiKeyList;
  if (!list) return undefined;
  const found = key.includes(list.separator)
    ? `holds '${list.separator}'`
    : key.startsWith(list.quote)
    ? `starts with '${list.quote}'`
    : undefined;
  return found &&
    `${found} (expected a key without '${list.separator}', not opening with '${list.quote}': ${kind.title} reads --api-key as keys separated by '${list.separator}', each may be quoted)`;
}

/** Every API key replaced by `***`: the launcher's and any `--api-key` of the command line (a `command` card's own). */
export function masked(plan: EnginePlan, text: string): string {
  const keys = plan.args.flatMap((arg, i) =>
    arg === "--api-key"
      ? [plan.args[i + 1] ?? ""]
      : arg.startsWith("--api-key=")
      ? [arg.slice("--api-key=".length)]
      : []
  );
  for (const key of [plan.apiKey, ...keys]) {
    if (key) text = text.replaceAll(key, "***");
  }
  return text;
}
