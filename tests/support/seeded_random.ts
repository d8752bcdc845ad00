/**
 * A small seeded generator (mulberry32), so a failing generated case names a
 * text that comes back every run.
 *
 * @example
 * ```ts ignore
 * const next = random(23);
 * next(); // a number in [0, 1)
 * ```
 */
export function random(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
