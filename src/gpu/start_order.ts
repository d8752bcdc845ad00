// The start gate's rule 1 known in advance, for `--dry-run`: a start on a
// device waits while an engine that asked earlier loads there. Pure.

/** Engine name → the earlier engines (request order) sharing one of its devices. */
export function startWaits(
  engines: readonly {
    readonly name: string;
    readonly devices: readonly string[] | null;
  }[],
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
