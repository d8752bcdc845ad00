// The routes an engine the launcher sleeps and wakes serves (vLLM's
// development routes, ../shared/ENGINES.md): read what its API server holds,
// put it to sleep, wake it. Each answer is a fact or a reason, never thrown.
import type { EnginePlan } from "./engine_plan.ts";
import { ENGINE_KINDS } from "./kinds.ts";
import type { LauncherSleep } from "./kinds/engine_kind.ts";
import { askEngine, engineOrigin } from "./metrics_read.ts";
import { launcherSleep } from "./sleep_after.ts";

/** What a route answered: done, or why not. */
export type RouteAnswer = { ok: true } | {
  ok: false;
  why: string;
  status?: number;
};

const ASK_MS = 2_000;
// Falling asleep waits for what is in flight (`mode=wait`); a wake reloads the weights.
const SLEEP_MS = 120_000;
const WAKE_MS = 300_000;

/** Its routes, where the launcher sleeps and wakes it. */
export function routesOf(plan: EnginePlan): LauncherSleep | undefined {
  return launcherSleep(plan.card, ENGINE_KINDS[plan.card.engine]);
}

/**
 * Requests its API server holds now, those parked while it sleeps included;
 * undefined when unread.
 *
 * @example `await serverLoad(plan)` is 1 while one request waits for a wake.
 */
export async function serverLoad(
  plan: EnginePlan,
  signal?: AbortSignal,
): Promise<number | undefined> {
  const routes = routesOf(plan);
  if (!routes) return undefined;
  const { path, field } = routes.load;
  const value = await fieldOf(plan, path, field, signal);
  return Number.isInteger(value) && (value as number) >= 0
    ? value as number
    : undefined;
}

/**
 * Its `GET /version`'s `version` (vLLM's), undefined when unread.
 *
 * @example `await engineVersion(plan)` is `"0.19.0"`.
 */
export async function engineVersion(
  plan: EnginePlan,
  signal?: AbortSignal,
): Promise<string | undefined> {
  const version = await fieldOf(plan, "/version", "version", signal);
  return typeof version === "string" ? version : undefined;
}

/** One field of a route's JSON answer; undefined when unread. */
async function fieldOf(
  plan: EnginePlan,
  path: string,
  field: string,
  signal: AbortSignal | undefined,
): Promise<unknown> {
  const answer = await ask(plan, path, ASK_MS, false, signal);
  if (!answer.ok) return undefined;
  try {
    return JSON.parse(answer.text)?.[field];
  } catch {
    return undefined;
  }
}

/** `POST` its sleep route (`wait`: what is in flight ends first). */
export async function askSleep(
  plan: EnginePlan,
  wait: boolean,
  signal?: AbortSignal,
): Promise<RouteAnswer> {
  const routes = routesOf(plan)!;
  const path = routes.sleep + (wait ? routes.wait : "");
  return done(await ask(plan, path, SLEEP_MS, true, signal));
}

/** `POST` its wake route. */
export async function askWake(
  plan: EnginePlan,
  signal?: AbortSignal,
): Promise<RouteAnswer> {
  const path = routesOf(plan)!.wake;
  return done(await ask(plan, path, WAKE_MS, true, signal));
}

/** Whether its development routes answer a caller without its key (an older build guards only `/v1`). */
export async function sleepRouteOpen(
  plan: EnginePlan,
  signal?: AbortSignal,
): Promise<boolean> {
  const keyless = { ...plan, apiKey: "" };
  const routes = routesOf(plan)!;
  const answer = await ask(keyless, routes.asleep, ASK_MS, false, signal);
  return answer.status !== 401 && answer.status !== 403;
}

function ask(
  plan: EnginePlan,
  path: string,
  timeoutMs: number,
  post: boolean,
  signal: AbortSignal | undefined,
) {
  const url = engineOrigin(plan.host, plan.port) + path;
  return askEngine(url, {
    apiKey: plan.apiKey,
    timeoutMs,
    maxBytes: 64 * 1024,
    post,
    ...signal ? { signal } : {},
  });
}

function done(
  answer: Awaited<ReturnType<typeof ask>>,
): RouteAnswer {
  if (answer.ok) return { ok: true };
  return answer.status === undefined
    ? { ok: false, why: answer.why }
    : { ok: false, why: answer.why, status: answer.status };
}
