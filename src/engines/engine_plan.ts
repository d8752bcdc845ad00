/**
 * One engine as a plain value: where it runs and the whole command line it
 * runs, resolved from its card once (executable, weights) and handed from the
 * launcher's plan to the spawn. Nothing here starts anything.
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";
import { secretFromEnv } from "../common/secret_file.ts";
import { urlHost } from "../common/settings.ts";
import { EngineError } from "./engine_error.ts";
import { ENGINE_KINDS, executableOf } from "./kinds.ts";
import { findExecutable, resolveModel } from "./launch.ts";

/** Where an engine runs: what its plan is made from besides its card. */
export interface EngineSite {
  /** Host the engine binds; also used to reach it. */
  host: string;
  /** Port the engine listens on. */
  port: number;
  /** Root directory: weights under `models/`, the log under `logs/`. */
  directory: string;
  /**
   * API key the engine demands; empty for none.
   * @default {LOCAL_ENGINE_API_KEY or the file LOCAL_ENGINE_API_KEY_FILE names, read now}
   */
  apiKey?: string;
  /**
   * Environment set over the card's `env` (the launcher's GPU placement uses
   * it for `CUDA_VISIBLE_DEVICES`).
   */
  env?: Readonly<Record<string, string>>;
  /** Its devices, `[]` for none, null when not placed. @default {null} */
  gpus?: readonly string[] | null;
  /** The share of each of its devices (1: whole), null when not placed. @default {null} */
  share?: number | null;
}

/** One engine as it will run: checked, printable, comparable. */
export interface EnginePlan extends Readonly<Required<EngineSite>> {
  /** The catalogue name. */
  readonly name: string;
  /** The expanded card. */
  readonly card: ModelCard;
  /** Its log file: `<directory>/logs/<name>.log`. */
  readonly logFile: string;
  /** The executable run. */
  readonly executable: string;
  /** Its arguments. */
  readonly args: readonly string[];
  /** What the launcher adds to its environment: the card's `env`, then the site's. */
  readonly env: Readonly<Record<string, string>>;
}

/**
 * Resolves an engine's command line from its card: the executable (on PATH
 * or by path) and the weights (local, else the hub id).
 *
 * @param card The expanded card.
 * @param site Where it runs.
 * @returns The engine's plan.
 * @throws {EngineError} When the engine kind is unknown, the executable is
 *   missing, or neither local weights nor a hub id exist.
 */
export function planEngine(card: ModelCard, site: EngineSite): EnginePlan {
  const apiKey = site.apiKey ?? secretFromEnv("LOCAL_ENGINE_API_KEY");
  const kind = ENGINE_KINDS[card.engine];
  if (!kind) {
    throw new EngineError(
      `Cannot prepare ${card.name}: unknown engine '${card.engine}'`,
    );
  }
  const owned = card.args.find((arg) =>
    kind.ownedFlags?.includes(
      arg.replace(/=.*$/, "").replace(/^--.*/, (long) =>
        long.replaceAll("_", "-")),
    )
  );
  if (owned !== undefined) {
    throw new EngineError(
      `Cannot prepare ${card.name}: card '${card.name}', field 'args' sets ${
        owned.replace(/=.*$/, "")
      }, which the launcher sets (expected none of ${
        kind.ownedFlags!.join(", ")
      } in args: the launcher passes --host, --port, the card's name, the key of LOCAL_ENGINE_API_KEY and its local or hub)`,
    );
  }
  const executable = executableOf(card, kind);
  if (!executable || !findExecutable(executable)) {
    const what = notRunnable(executable);
    throw new EngineError(
      what
        ? `Cannot prepare ${card.name}: the ${card.engine} engine's executable ${what} (expected an executable file: set the card's executable to one, or chmod +x it)`
        : `Cannot prepare ${card.name}: the ${card.engine} engine's executable '${executable}' is not on PATH (${kind.install}, or set the card's executable)`,
    );
  }
  const { model, isLocal } = resolveModel(card, kind, site.directory);
  const args = kind.argv({
    model,
    isLocal,
    host: site.host,
    port: site.port,
    name: card.name,
    apiKey,
    card,
  });
  return {
    name: card.name,
    card,
    host: site.host,
    port: site.port,
    directory: site.directory,
    logFile: `${site.directory}/logs/${card.name}.log`,
    gpus: site.gpus ?? null,
    share: site.share ?? null,
    apiKey,
    executable,
    args,
    env: { ...card.env, ...site.env },
  };
}

/**
 * What the file an executable names is, when it exists but cannot be run (a
 * directory, a file without execute permission); undefined when there is none.
 */
function notRunnable(executable: string): string | undefined {
  const dirs = executable.includes("/")
    ? [""]
    : (Deno.env.get("PATH") ?? "").split(":").filter(Boolean).map((d) =>
      `${d}/`
    );
  for (const dir of dirs) {
    const path = `${dir}${executable}`;
    try {
      const info = Deno.statSync(path);
      return info.isDirectory
        ? `'${path}' is a directory`
        : `'${path}' is not executable (mode ${
          ((info.mode ?? 0) & 0o777).toString(8).padStart(3, "0")
        })`;
    } catch {
      // Not there (or not readable): the next directory.
    }
  }
  return undefined;
}

/** The engine's OpenAI-compatible base URL, e.g. `http://localhost:5001/v1`. */
export function baseUrl(plan: EnginePlan): string {
  return `http://${urlHost(plan.host)}:${plan.port}/v1`;
}

/**
 * `text` with every API key of the engine replaced by `***`, for anything
 * shown or written about it: the launcher's, and any `--api-key` value of
 * its command line (a `command` card's own).
 */
export function masked(plan: EnginePlan, text: string): string {
  const keys = [
    plan.apiKey,
    ...plan.args.flatMap((arg, i) =>
      arg === "--api-key"
        ? [plan.args[i + 1] ?? ""]
        : arg.startsWith("--api-key=")
        ? [arg.slice("--api-key=".length)]
        : []
    ),
  ];
  return keys.reduce(
    (shown, key) => key ? shown.replaceAll(key, "***") : shown,
    text,
  );
}
