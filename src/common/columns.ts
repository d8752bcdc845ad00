const RESET = "\x1b[0m";

/** A table aligned like `docker ps` (no trailing spaces); `paint` gives a cell's ANSI code (`row` -1: the titles); only the text is painted, not the padding. */
export function alignColumns(
  titles: readonly string[],
  rows: readonly (readonly string[])[],
  paint: (row: number, column: number) => string = () => "",
  gap = 3,
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
    }).join(" ".repeat(gap)).trimEnd();
  }
  return [line(titles, -1), ...rows.map((cells, r) => line(cells, r))].join(
    "\n",
  );
}
