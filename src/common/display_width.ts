// Terminal columns: East Asian Wide and Fullwidth characters and emoji take
// two, combining marks none; cuts fall between grapheme clusters.

/** The W and F blocks of Unicode's EastAsianWidth.txt, by block (a gap inside a block counts as wide too). */
const WIDE: readonly (readonly [number, number])[] = [
  [0x1100, 0x115f], // Hangul Jamo, leading consonants
  [0x2329, 0x232a], // angle brackets
  [0x2e80, 0x303e], // CJK radicals, Kangxi, ideographic description, CJK punctuation
  [0x3041, 0x3247], // kana, Bopomofo, Hangul compatibility Jamo, enclosed CJK
  [0x3250, 0x4dbf], // enclosed CJK, CJK compatibility, CJK extension A
  [0x4e00, 0xa4cf], // CJK unified ideographs, Yi
  [0xa960, 0xa97f], // Hangul Jamo extended A
  [0xac00, 0xd7a3], // Hangul syllables
  [0xf900, 0xfaff], // CJK compatibility ideographs
  [0xfe10, 0xfe19], // vertical forms
  [0xfe30, 0xfe6f], // CJK compatibility forms, small form variants
  [0xff00, 0xff60], // fullwidth forms
  [0xffe0, 0xffe6], // fullwidth signs
  [0x16fe0, 0x16fff], // ideographic symbols
  [0x17000, 0x18dff], // Tangut, Khitan
  [0x1aff0, 0x1b2ff], // kana supplement and extensions, Nushu
  [0x1f200, 0x1f2ff], // enclosed ideographic supplement
  [0x20000, 0x3fffd], // CJK extensions B and later
];

// Emoji take two too (W in EastAsianWidth.txt; a flag, as terminals draw it).
const EMOJI = /\p{Emoji_Presentation}/u;
const ZERO = /[\p{Mn}\p{Me}\u200b-\u200f\u2060-\u2064\ufeff]/u;

function codePointWidth(char: string): number {
  const code = char.codePointAt(0)!;
  if (WIDE.some(([from, to]) => code >= from && code <= to)) return 2;
  if (EMOJI.test(char)) return 2;
  return ZERO.test(char) ? 0 : 1;
}

const GRAPHEMES = new Intl.Segmenter("en", { granularity: "grapheme" });

/** A grapheme cluster takes the width of its widest code point: `e` + U+0301 one, 👩‍💻 two. */
function clusterWidth(cluster: string): number {
  let width = 0;
  for (const char of cluster) width = Math.max(width, codePointWidth(char));
  return width;
}

/**
 * The columns `text` takes on a terminal.
 *
 * @example
 * ```ts
 * import { displayWidth } from "./display_width.ts";
 * console.assert(displayWidth("qwen3") === 5);
 * console.assert(displayWidth("通义千问") === 8);
 * console.assert(displayWidth("e\u0301") === 1);
 * ```
 */
export function displayWidth(text: string): number {
  // deno-lint-ignore no-control-regex -- ASCII, the common case
  if (/^[\x00-\x7f]*$/.test(text)) return text.length;
  let width = 0;
  for (const { segment } of GRAPHEMES.segment(text)) {
    width += clusterWidth(segment);
  }
  return width;
}

/**
 * `text` unchanged when it fits `width` columns, else cut between characters
 * and ended with `…`, in at most `width` columns (at least the `…`).
 *
 * @example
 * ```ts
 * import { cutToWidth } from "./display_width.ts";
 * console.assert(cutToWidth("backoff (restart in 4s)", 9) === "backoff …");
 * console.assert(cutToWidth("通义千问", 6) === "通义…");
 * ```
 */
export function cutToWidth(text: string, width: number): string {
  if (displayWidth(text) <= width) return text;
  let kept = "";
  let used = 0;
  for (const { segment } of GRAPHEMES.segment(text)) {
    const next = clusterWidth(segment);
    if (used + next > width - 1) break;
    kept += segment;
    used += next;
  }
  return `${kept}…`;
}

export function padToWidth(text: string, width: number): string {
  return text + " ".repeat(Math.max(0, width - displayWidth(text)));
}
