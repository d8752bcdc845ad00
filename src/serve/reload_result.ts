/**
 * What one reload did, and its one summary line. Pure.
 *
 * @module
 */

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
  /**
   * The start-up checks' warnings for the engines it restarted (weights that
   * may not fit, unknown engine flags), each also logged.
   */
  warnings: string[];
  /** The summary line, as logged. */
  summary: string;
  /** How long the reload took, in milliseconds (restarted engines: until spawned). */
  ms: number;
}

function count(n: number, one: string, many: string): string {
  return `${n} ${n === 1 ? one : many}`;
}

/**
 * The summary line of a reload, e.g. `reload: 1 engine restarted (qwen3-8b),
 * 1 changed without a restart (bge-m3), TLS pair reloaded (serial 0x1f),
 * secret reloaded`, or `reload refused: <error>`.
 *
 * @param result The reload's result (`summary` and `ms` are not read).
 * @returns The line.
 *
 * @example
 * ```ts ignore
 * reloadSummary({ ...result, ok: false, error: "Cannot read catalogue …" }); // "reload refused: Cannot read catalogue …"
 * ```
 */
export function reloadSummary(
  result: Omit<ReloadResult, "summary" | "ms">,
): string {
  if (!result.ok) return `reload refused: ${result.error ?? "unknown error"}`;
  const parts: string[] = [];
  const { restarted, changed, catalogue } = result;
  if (restarted.length > 0) {
    parts.push(
      `${count(restarted.length, "engine", "engines")} restarted (${
        restarted.join(", ")
      })`,
    );
  }
  if (changed.length > 0) {
    parts.push(
      `${changed.length} changed without a restart (${changed.join(", ")})`,
    );
  }
  for (const { name, error } of result.failed) {
    parts.push(`engine ${name} could not start: ${error}`);
  }
  if (catalogue.added.length + catalogue.removed.length > 0) {
    const names = [
      ...catalogue.added.map((name) => `+${name}`),
      ...catalogue.removed.map((name) => `-${name}`),
    ];
    parts.push(`catalogue updated (${names.join(", ")})`);
  }
  if (result.tlsSerial !== undefined) {
    parts.push(`TLS pair reloaded (serial 0x${result.tlsSerial})`);
  }
  if (result.secrets.includes("IDP_SECRET")) parts.push("secret reloaded");
  if (result.secrets.includes("LOCAL_ENGINE_API_KEY")) {
    parts.push("engine API key reloaded (used from each engine's next start)");
  }
  if (parts.length === 0) {
    return `reload: nothing changed (${
      count(result.unchanged.length, "engine", "engines")
    } unchanged)`;
  }
  return `reload: ${parts.join(", ")}`;
}

/**
 * The result of a refused reload: its planning failed, it was asked for once
 * the launcher was stopping, or of a launcher that never ran.
 *
 * @param error The reason, one line.
 * @param ms How long the refused reload took.
 * @returns A refused result, its lists empty.
 */
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
