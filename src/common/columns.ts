/**
 * Text tables aligned like `docker ps`: one title line, one line per row,
 * columns padded to their widest cell and three spaces apart, no trailing
 * spaces. The status view and `--dry-run`'s plan print their engine rows with
 * it, in the same column order.
 *
 * @module
 */

/** ANSI reset, after a painted cell. */
const RESET = "\x1b[0m";

/**
 * Aligns `rows` under `titles`.
 *
 * @param titles The column titles.
 * @param rows The cells of each row, as many as titles.
 * @param paint An ANSI code for a cell (`row` -1 is the title line), or "":
 *   only the text is painted, so the padding keeps its width.
 * @returns The lines, joined with `\n`.
 *
 * @example
 * ```ts
 * import { alignColumns } from "./columns.ts";
 * const text = alignColumns(["MODEL", "URL"], [["bge-m3", "http://localhost:5001/v1"]]);
 * console.assert(text.split("\n")[1] === "bge-m3   http://localhost:5001/v1");
 * ```
 */
export function alignColumns(
  titles: readonly string[],
  rows: readonly (readonly string[])[],
  paint: (row: number, column: number) => string = () => "",
): string {
  const widths = titles.map((title, i) =>
    Math.max(title.length, ...rows.map((cells) => cells[i]?.length ?? 0))
  );
  function line(cells: readonly string[], row: number): string {
    return cells.map((text, i) => {
      const padded = i === cells.length - 1 ? text : text.padEnd(widths[i]!);
      const code = paint(row, i);
      return code === ""
        ? padded
        : `${code}${text}${RESET}${padded.slice(text.length)}`;
    }).join("   ").trimEnd();
  }
  return [line(titles, -1), ...rows.map((cells, r) => line(cells, r))].join(
    "\n",
  );
}
