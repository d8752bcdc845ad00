/**
 * A message on one line, for log lines and one-line errors.
 *
 * @module
 */

/**
 * A message on one line: every run of whitespace, line breaks included,
 * becomes one space.
 *
 * @param message A text, or an error (its message).
 * @returns The message on one line, trimmed.
 *
 * @example
 * ```ts
 * import { oneLine } from "./one_line.ts";
 * console.assert(oneLine(new Error("bad\n  value")) === "bad value");
 * ```
 */
export function oneLine(message: unknown): string {
  const text = message instanceof Error ? message.message : String(message);
  return text.replace(/\s+/g, " ").trim();
}

/**
 * A message on one line, its own spacing kept: each line break, with the
 * spaces around it, becomes one space. For messages that quote values, where
 * a double space is part of what is quoted.
 *
 * @param text The message.
 * @returns The message on one line.
 *
 * @example
 * ```ts
 * import { foldLines } from "./one_line.ts";
 * console.assert(foldLines("'a  b'\n  is bad") === "'a  b' is bad");
 * ```
 */
export function foldLines(text: string): string {
  return text.replace(/\s*[\r\n]+\s*/g, " ");
}

/** A text on one line, cut to 80 characters: for quoting what a program printed. */
export function clip(text: string): string {
  const line = text.replace(/\s+/g, " ");
  return line.length > 80 ? `${line.slice(0, 77)}...` : line;
}
