/** Close names for "did you mean …?": by edit distance, or one containing the other; case ignored, ties in name order. */
export function closeMatches(
  query: string,
  names: readonly string[],
  max = 3,
): string[] {
  const q = query.toLowerCase();
  if (q === "") return [];
  const scored: [number, string][] = [];
  for (const name of names) {
    const n = name.toLowerCase();
    const distance = editDistance(q, n);
    const limit = Math.max(1, Math.floor(Math.max(q.length, n.length) / 3));
    if (distance <= limit && distance < Math.max(q.length, n.length)) {
      scored.push([distance, name]);
    } else if (
      q.length >= 3 && n.length >= 3 && (n.includes(q) || q.includes(n))
    ) {
      scored.push([100 + Math.abs(n.length - q.length), name]);
    }
  }
  scored.sort((a, b) =>
    a[0] - b[0] || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0)
  );
  return scored.slice(0, max).map(([, name]) => name);
}

/** `a`, `a or b`, `a, b or c`. */
export function orList(items: readonly string[]): string {
  return items.length <= 1
    ? items.join("")
    : `${items.slice(0, -1).join(", ")} or ${items.at(-1)}`;
}

/** Optimal string alignment distance: insertions, deletions, substitutions, adjacent swaps. */
function editDistance(a: string, b: string): number {
  const width = b.length + 1;
  const d = new Array<number>((a.length + 1) * width).fill(0);
  for (let i = 0; i <= a.length; i++) d[i * width] = i;
  for (let j = 0; j <= b.length; j++) d[j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(
        d[(i - 1) * width + j]! + 1,
        d[i * width + j - 1]! + 1,
        d[(i - 1) * width + j - 1]! + cost,
      );
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        best = Math.min(best, d[(i - 2) * width + j - 2]! + 1);
      }
      d[i * width + j] = best;
    }
  }
  return d[a.length * width + b.length]!;
}
