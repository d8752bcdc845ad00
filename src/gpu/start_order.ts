/**
 * The start gate's rule 1 known in advance: engines start in request order,
 * and a start on a device waits while an engine that asked earlier loads
 * there (see `start_gate.ts`). Pure: which engines each one waits for, from
 * the placement alone; `--dry-run` shows it before anything loads.
 *
 * @module
 */

/** One engine as the gate sees it. */
export interface GatedEngine {
  /** The catalogue name. */
  readonly name: string;
  /** Its devices as placed; null or `[]` are never held. */
  readonly devices: readonly string[] | null;
}

/**
 * For each engine, the engines before it in request order that share one of
 * its devices: it starts only once their loads are over (rule 1).
 *
 * @param engines The engines in request order.
 * @returns Engine name → the names it waits for, in request order.
 *
 * @example
 * ```ts ignore
 * startWaits([{ name: "a", devices: ["0"] }, { name: "b", devices: ["0"] }]);
 * // Map { "a" => [], "b" => ["a"] }
 * ```
 */
export function startWaits(
  engines: readonly GatedEngine[],
): Map<string, string[]> {
  const waits = new Map<string, string[]>();
  engines.forEach((engine, i) => {
    const mine = engine.devices ?? [];
    waits.set(
      engine.name,
      engines.slice(0, i).filter((earlier) =>
        (earlier.devices ?? []).some((device) => mine.includes(device))
      ).map((earlier) => earlier.name),
    );
  });
  return waits;
}
