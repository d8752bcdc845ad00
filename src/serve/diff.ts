// The difference of two plans, a value: a start applies `diff(undefined,
// plan)`, a reload `diff(running, next)`; and what a reload reports.
import type { EngineChanges } from "./card_change.ts";
import type { Plan } from "./plan.ts";
import type { TlsPair } from "./facts.ts";

/** Each engine by what happens to it (a start: every one `start`), and the launcher's own changes. */
export interface Changes extends EngineChanges {
  /** The new TLS pair, when its files changed. */
  tls?: TlsPair;
  secret: boolean;
  engineKey: boolean;
  catalogue: { added: string[]; removed: string[] };
}

/** What changes from the running plan `a` (none: a start) to `b`, made against it. */
export function diff(a: Plan | undefined, b: Plan): Changes {
  const before = new Set(a?.catalogue ?? []);
  const after = new Set(b.catalogue);
  const tls = a?.tls && b.tls &&
      (a.tls.cert !== b.tls.cert || a.tls.key !== b.tls.key)
    ? b.tls
    : undefined;
  return {
    ...b.changes,
    ...tls ? { tls } : {},
    secret: a !== undefined && !a.devMode && a.idpSecret !== b.idpSecret,
    engineKey: a !== undefined && a.engineKey !== b.engineKey,
    catalogue: {
      added: b.catalogue.filter((name) => !before.has(name)),
      removed: [...before].filter((name) => !after.has(name)).sort(),
    },
  };
}

/**
 * What one reload did (SIGHUP or {@linkcode Semioserve.reload}).
 *
 * @example
 * ```ts ignore
 * const result = await serve.reload();
 * if (!result.ok) console.error(result.error);
 * console.log(result.restarted); // ["qwen3-8b"]
 * ```
 */
export interface ReloadResult {
  /** True when the reload took effect; false when it was refused (nothing changed). */
  ok: boolean;
  /** Why it was refused: the one-line error start-up would give. */
  error?: string;
  /** Engines restarted with their new card. */
  restarted: string[];
  /** Engines whose card changed without a restart (`restart:`, `description`, `verb`). */
  changed: string[];
  /** Engines not touched. */
  unchanged: string[];
  /** Engines whose new run could not start, with why. */
  failed: { name: string; error: string }[];
  /** Catalogue names added and removed. */
  catalogue: { added: string[]; removed: string[] };
  /** The new certificate's serial number (hex), when a new TLS pair was loaded. */
  tlsSerial?: string;
  /** Secrets read again whose value changed: `IDP_SECRET`, `LOCAL_ENGINE_API_KEY`. */
  secrets: string[];
  /** The start-up checks' warnings for the engines it restarted, each also logged. */
  warnings: string[];
  /** The summary line, as logged. */
  summary: string;
  /** How long the reload took, in milliseconds (restarted engines: until spawned). */
  ms: number;
}

function count(n: number, one: string, many: string): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** A summary names this many cards of a list and counts the rest: one line, not 439 KB. */
const MAX_NAMED = 10;

function more(n: number): string {
  return `… and ${(n - MAX_NAMED).toLocaleString("en-US")} more`;
}

function some(names: readonly string[]): string {
  const named = names.slice(0, MAX_NAMED).join(", ");
  return names.length > MAX_NAMED ? `${named} ${more(names.length)}` : named;
}

export function reloadSummary(
  result: Omit<ReloadResult, "summary" | "ms">,
): string {
  if (!result.ok) return `reload refused: ${result.error ?? "unknown error"}`;
  const { restarted, changed, failed, catalogue, tlsSerial, secrets } = result;
  const names = [
    ...catalogue.added.map((name) => `+${name}`),
    ...catalogue.removed.map((name) => `-${name}`),
  ];
  const engines = count(restarted.length, "engine", "engines");
  const parts = [
    restarted.length > 0 && `${engines} restarted (${some(restarted)})`,
    changed.length > 0 &&
    `${changed.length} changed without a restart (${some(changed)})`,
    ...failed.slice(0, MAX_NAMED).map(({ name, error }) =>
      `engine ${name} could not start: ${error}`
    ),
    failed.length > MAX_NAMED && `${more(failed.length)} could not start`,
    names.length > 0 && `catalogue updated (${some(names)})`,
    tlsSerial !== undefined && `TLS pair reloaded (serial 0x${tlsSerial})`,
    secrets.includes("IDP_SECRET") && "secret reloaded",
    secrets.includes("LOCAL_ENGINE_API_KEY") &&
    "engine API key reloaded (used from each engine's next start)",
  ].filter((part) => part !== false);
  const same = count(result.unchanged.length, "engine", "engines");
  if (parts.length === 0) return `reload: nothing changed (${same} unchanged)`;
  return `reload: ${parts.join(", ")}`;
}

/** What a reload begun at `began` (`performance.now()`) applying `changes` did. */
export function reloadResult(
  changes: Changes,
  failed: ReloadResult["failed"],
  warnings: readonly string[],
  began: number,
): ReloadResult {
  const result = {
    ok: true,
    // One whose new run could not start (the stop came first) was stopped, not restarted.
    restarted: [...changes.restart, ...changes.retry]
      .filter((name) => !failed.some((f) => f.name === name)),
    changed: changes.amend,
    unchanged: changes.same,
    failed,
    catalogue: changes.catalogue,
    ...changes.tls ? { tlsSerial: changes.tls.serial } : {},
    secrets: [
      ...changes.secret ? ["IDP_SECRET"] : [],
      ...changes.engineKey ? ["LOCAL_ENGINE_API_KEY"] : [],
    ],
    warnings: [...warnings],
  };
  const ms = performance.now() - began;
  return { ...result, summary: reloadSummary(result), ms };
}

/** A refused reload: planning failed, the launcher is stopping, or never ran. */
export function refusedReload(
  error = "Cannot reload: the launcher is not running",
  ms = 0,
): ReloadResult {
  const result = {
    ok: false,
    error,
    restarted: [],
    changed: [],
    unchanged: [],
    failed: [],
    catalogue: { added: [], removed: [] },
    secrets: [],
    warnings: [],
  };
  return { ...result, summary: reloadSummary(result), ms };
}
