// Text that an engine (or a journal from elsewhere) wrote, made safe to print
// on a terminal: no escape sequence can retitle it, write the clipboard, move
// the cursor or fake a launcher line.

/** Anything a terminal may act on: C0 (tab kept), DEL, C1. */
// deno-lint-ignore no-control-regex -- finding them is the point
const CONTROL = /[\x00-\x08\x0a-\x1f\x7f-\x9f]/;

// Whole sequences go, so their parameters do not stay behind as noise.
const SEQUENCES = new RegExp(
  [
    // OSC, DCS, SOS, PM, APC: up to BEL or ST; unterminated, a terminal would swallow the rest too.
    String
      .raw`(?:\x1b[\]PX^_]|[\x90\x98\x9d-\x9f])[\s\S]*?(?:\x07|\x1b\\|\x9c|$)`,
    // CSI (`ESC[2J`, cursor moves, colours), 7-bit and 8-bit.
    String.raw`(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]`,
    // Any other escape sequence (`ESC 7`, `ESC (B`, `ESC c`).
    String.raw`\x1b[\x20-\x2f]*[\x30-\x7e]`,
  ].join("|"),
  "g",
);

/** Line breaks become one space, so words stay apart. */
export function printable(text: string): string {
  if (!CONTROL.test(text)) return text;
  return text
    .replace(SEQUENCES, "")
    .replace(/[\n\v\f\r]+/g, " ")
    .replace(new RegExp(CONTROL.source, "g"), "");
}
