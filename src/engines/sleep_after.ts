// A card's `sleep_after` as its kind's own sleep (llama.cpp's flag, vLLM's
// routes the launcher drives), or a refusal: an engine that no request can
// wake would stop serving for good.
import type { ModelCard } from "../catalogue.ts";
import { EngineError } from "./engine_error.ts";
import type { EngineKind, LauncherSleep } from "./kinds/engine_kind.ts";
import { flagValue } from "./kinds/flag_values.ts";

/**
 * The args that make the engine sleep after the card's `sleep_after` idle
 * seconds; none for 0 or unset.
 *
 * @throws {EngineError} When no request can wake its kind, or the card's args set its flag too.
 * @example `sleepArgs({ ...card, sleepAfter: 600 }, LLAMA_CPP)` is `["--sleep-idle-seconds", "600"]`.
 */
export function sleepArgs(card: ModelCard, kind: EngineKind): string[] {
  const { name, sleepAfter } = card;
  const flag = kind.sleep && "flag" in kind.sleep ? kind.sleep.flag : "";
  const given = flag ? flagValue(card.args, [flag]) : undefined;
  if (sleepAfter !== undefined && given) {
    throw new EngineError(
      `Cannot prepare ${name}: card '${name}' sets both sleep_after and ${flag} in args (expected one of them: sleep_after sets ${flag} itself)`,
    );
  }
  if (!sleepAfter) return [];
  const routes = launcherSleep(card, kind);
  if (routes) return [...routes.args];
  if (!flag) {
    const why = kind.sleep && "refused" in kind.sleep
      ? kind.sleep.refused
      : `no request can wake a sleeping ${kind.title} engine`;
    throw new EngineError(
      `Cannot prepare ${name}: card '${name}' sets sleep_after, which engine ${card.engine} cannot honour: ${why} (expected no sleep_after for engine ${card.engine})`,
    );
  }
  return [flag, String(sleepAfter)];
}

/**
 * The routes the launcher sleeps and wakes it by, for a card with
 * `sleep_after` whose kind has them; undefined otherwise.
 *
 * @example `launcherSleep({ ...card, sleepAfter: 60 }, VLLM)?.wake` is `"/wake_up"`.
 */
export function launcherSleep(
  card: ModelCard,
  kind: EngineKind | undefined,
): LauncherSleep | undefined {
  if (!card.sleepAfter || !kind?.sleep || !("launcher" in kind.sleep)) return;
  return kind.sleep.launcher;
}

/** The environment its sleep routes need (vLLM's development mode), none otherwise. */
export function sleepEnv(
  card: ModelCard,
  kind: EngineKind | undefined,
): Readonly<Record<string, string>> {
  return launcherSleep(card, kind)?.env ?? {};
}

/**
 * Idle seconds before the engine sleeps: the card's `sleep_after`, else its
 * kind's flag in its args; undefined when it never does.
 *
 * @example `sleepSeconds({ ...card, args: ["--sleep-idle-seconds", "2"] }, LLAMA_CPP)` is 2.
 */
export function sleepSeconds(
  card: ModelCard,
  kind: EngineKind | undefined,
): number | undefined {
  if (card.sleepAfter !== undefined) {
    return kind?.sleep && !("refused" in kind.sleep) && card.sleepAfter ||
      undefined;
  }
  const flag = kind?.sleep && "flag" in kind.sleep ? kind.sleep.flag : "";
  const seconds = Number(flag && flagValue(card.args, [flag])?.value);
  return seconds > 0 ? seconds : undefined;
}

/** Whether it sleeps and wakes by itself (its kind's flag): nothing can stop its wake, so its memory stays counted. */
export function wakesItself(card: ModelCard, kind?: EngineKind): boolean {
  return !!kind?.sleep && "flag" in kind.sleep && !!sleepSeconds(card, kind);
}
