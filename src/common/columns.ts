import { displayWidth, padToWidth } from "./display_width.ts";

const RESET = "\x1b[0m";

/** A table aligned like `docker ps` (no trailing spaces; widths in terminal columns, CJK two); `paint` gives a cell's ANSI code (`row` -1: the titles); only the text is painted, not the padding. */
export function alignColumns(
  titles: readonly string[],
  rows: readonly (readonly string[])[],
  paint: (row: number, column: number) => string = () => "",
  gap = 3,
): string {
  const widths = titles.map((title, i) =>
    Math.max(displayWidth(title), ...rows.map((c) => displayWidth(c[i] ?? "")))
  );
  function line(cells: readonly string[], row: number): string {
    return cells.map((text, i) => {
      const padded = i === cells.length - 1
        ? text
        : padToWidth(text, widths[i]!);
      const code = paint(row, i);
      return code === ""
        ? padded
        : `${code}${text}${RESET}${padded.slice(text.length)}`;
    }).join(" ".repeat(gap)).trimEnd();
  }
  const lines = [line(titles, -1), ...rows.map((cells, r) => line(cells, r))];
  return lines.join("\n");
}
