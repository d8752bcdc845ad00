// What launching an engine needs from the machine: the executable, the
// weights (local, else the hub id; their size) and the environment.
import type { ModelCard } from "../catalogue.ts";
import { oneLine } from "../common/one_line.ts";
import type { EngineKind } from "./kinds.ts";
import { EngineError } from "./engine_error.ts";

/** A name with a slash is a path, a bare name is looked up on `path`; `why` says why the first one found cannot run. */
export function locateExecutable(
  name: string,
  path: string | undefined,
): { found: boolean; why?: string; unsure?: boolean } {
  const dirs = name.includes("/")
    ? [""]
    : (path ?? "").split(":").filter(Boolean).map((d) => `${d}/`);
  let why: string | undefined;
  for (const dir of dirs) {
    const file = `${dir}${name}`;
    let info: Deno.FileInfo;
    try {
      info = Deno.statSync(file);
    } catch (error) {
      // Without read access to PATH the check cannot decide; the spawn will.
      if (error instanceof Deno.errors.NotCapable && dir) {
        return { found: true, unsure: true };
      }
      continue;
    }
    if (info.isFile && ((info.mode ?? 0o111) & 0o111) !== 0) {
      return { found: true };
    }
    const mode = ((info.mode ?? 0) & 0o777).toString(8).padStart(3, "0");
    why ??= info.isDirectory
      ? `'${file}' is a directory`
      : `'${file}' is not executable (mode ${mode})`;
  }
  return why === undefined ? { found: false } : { found: false, why };
}

// The launcher's own variables that no engine sees.
const PRIVATE_ENV: readonly string[] =
  "IDP_SECRET IDP_ISSUER IDP_SECRET_FILE LOCAL_ENGINE_API_KEY_FILE".split(" ");

export function inheritedEnv(
  env: Readonly<Record<string, string | undefined>>,
): Record<string, string> {
  const kept = Object.entries(env).filter((entry): entry is [string, string] =>
    entry[1] !== undefined && !PRIVATE_ENV.includes(entry[0])
  );
  return Object.fromEntries(kept);
}

export function resolveModel(
  card: ModelCard,
  kind: EngineKind,
  directory: string,
): { model: string; isLocal: boolean } {
  const path = `${directory}/models/${card.local}`;
  let info: Deno.FileInfo;
  try {
    info = Deno.statSync(path);
  } catch (error) {
    const absent = error instanceof Deno.errors.NotFound ||
      error instanceof Deno.errors.NotCapable;
    if (!absent) throw error;
    if (card.hub) return { model: card.hub, isLocal: false };
    throw new EngineError(
      `Cannot prepare ${card.name}: no weights at ${path} and the card has no hub id`,
    );
  }
  const absolute = Deno.realPathSync(path);
  if (!info.isDirectory || !kind.localFile) {
    return { model: absolute, isLocal: true };
  }
  try {
    const files = [...Deno.readDirSync(absolute)]
      .filter((entry) => entry.isFile).map((entry) => entry.name);
    return { model: kind.localFile(absolute, files), isLocal: true };
  } catch (cause) {
    throw new EngineError(
      `Cannot prepare ${card.name}: ${(cause as Error).message}`,
      { cause },
    );
  }
}

/** What lies under `<directory>/models/<local>`; `hub`: nothing, the engine fetches the hub id. */
export type LocalWeights =
  | { readonly kind: "hub" }
  | { readonly kind: "local"; readonly path: string; readonly bytes: number }
  | {
    readonly kind: "unreadable";
    readonly path: string;
    readonly reason: string;
  };

const WEIGHTS = /\.(safetensors|bin|pt|gguf)$/;

/**
 * The weight files' `stat` sizes (never opened), directly in the directory,
 * links followed as a hub cache lays them out. Only `.safetensors` count when
 * there are any: many repositories ship the weights twice (`pytorch_model.bin`
 * too), and vLLM and SGLang load the safetensors copy.
 */
export function localWeights(card: ModelCard, directory: string): LocalWeights {
  const path = `${directory}/models/${card.local}`;
  try {
    const files = weightFiles(path);
    if (!files) return { kind: "hub" };
    const size = (file: string) => Deno.statSync(file).size;
    const bytes = files.reduce((sum, file) => sum + size(file), 0);
    return { kind: "local", path, bytes };
  } catch (error) {
    return { kind: "unreadable", path, reason: oneLine(error) };
  }
}

/** The weight files at `path` in name order (see {@linkcode localWeights}); null: nothing there. */
export function weightFiles(path: string): string[] | null {
  let info: Deno.FileInfo;
  try {
    info = Deno.statSync(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return null;
    throw error;
  }
  if (!info.isDirectory) return [path];
  const found = [...Deno.readDirSync(path)]
    .filter((entry) => !entry.isDirectory && WEIGHTS.test(entry.name))
    .map((entry) => `${path}/${entry.name}`)
    .filter((file) => Deno.statSync(file).isFile).sort();
  const safe = found.filter((file) => file.endsWith(".safetensors"));
  return safe.length ? safe : found;
}
