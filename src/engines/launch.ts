/**
 * What launching an engine needs from the machine, resolved from its card: the
 * executable (on PATH or by path), the weights (local, else the hub id) and
 * the environment (the launcher's, minus its secrets, plus the card's).
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";
import type { EngineKind } from "./kinds.ts";
import { EngineError } from "./engine_error.ts";

function exists(path: string): Deno.FileInfo | undefined {
  try {
    return Deno.statSync(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return undefined;
    if (error instanceof Deno.errors.NotCapable) return undefined;
    throw error;
  }
}

/**
 * Finds an executable: a name with a slash is checked as a path, a bare name is
 * looked up on PATH. Returns false only when it is certainly missing.
 */
export function findExecutable(name: string): boolean {
  const executable = (info: Deno.FileInfo | undefined) =>
    info !== undefined && info.isFile && ((info.mode ?? 0o111) & 0o111) !== 0;
  if (name.includes("/")) return executable(exists(name));
  const dirs = (Deno.env.get("PATH") ?? "").split(":").filter(Boolean);
  for (const dir of dirs) {
    try {
      if (executable(Deno.statSync(`${dir}/${name}`))) return true;
    } catch (error) {
      // Without read access to PATH the check cannot decide; the spawn will.
      if (error instanceof Deno.errors.NotCapable) return true;
    }
  }
  return false;
}

/** Secrets of the launcher itself that no engine needs to see. */
const PRIVATE_ENV = [
  "IDP_SECRET",
  "IDP_ISSUER",
  "IDP_SECRET_FILE",
  "LOCAL_ENGINE_API_KEY_FILE",
];

/** The launcher's environment minus its secrets, plus the card's `env`. */
export function engineEnv(
  cardEnv: Readonly<Record<string, string>>,
): Record<string, string> {
  const env = Deno.env.toObject();
  for (const name of PRIVATE_ENV) delete env[name];
  return { ...env, ...cardEnv };
}

/** Local weights when `<directory>/models/<local>` exists, else the hub id. */
export function resolveModel(
  card: ModelCard,
  kind: EngineKind,
  directory: string,
): { model: string; isLocal: boolean } {
  const path = `${directory}/models/${card.local}`;
  const info = exists(path);
  if (info) {
    const absolute = Deno.realPathSync(path);
    if (info.isDirectory && kind.localFile) {
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
    return { model: absolute, isLocal: true };
  }
  if (card.hub) return { model: card.hub, isLocal: false };
  throw new EngineError(
    `Cannot prepare ${card.name}: no weights at ${path} and the card has no hub id`,
  );
}
