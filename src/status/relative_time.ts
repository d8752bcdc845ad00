/**
 * Times as people read them in a status table: "4m ago", "in 3s".
 *
 * @module
 */

/** A duration in its largest whole unit: `45s`, `4m`, `3h`, `2d`. */
export function shortDuration(ms: number): string {
  const s = Math.floor(Math.abs(ms) / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

/**
 * An ISO time relative to `now`: `4m ago`, `in 3s`, `just now` within a
 * second either way; `-` for no time and the text itself when it is not a time.
 */
export function relativeTime(
  iso: string | null | undefined,
  now: number,
): string {
  if (iso === null || iso === undefined || iso === "") return "-";
  const at = Date.parse(iso);
  if (Number.isNaN(at)) return iso;
  const delta = now - at;
  if (Math.abs(delta) < 1000) return "just now";
  return delta > 0
    ? `${shortDuration(delta)} ago`
    : `in ${shortDuration(delta)}`;
}
