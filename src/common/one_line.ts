/** Every run of whitespace becomes one space. */
export function oneLine(message: unknown): string {
  const text = message instanceof Error ? message.message : String(message);
  return text.replace(/\s+/g, " ").trim();
}

/** Only line breaks fold: a quoted value keeps its double spaces. */
export function foldLines(text: string): string {
  return text.replace(/\s*[\r\n]+\s*/g, " ");
}

/** For quoting what a program printed. */
export function clip(text: string): string {
  const line = text.replace(/\s+/g, " ");
  return line.length > 80 ? `${line.slice(0, 77)}...` : line;
}
