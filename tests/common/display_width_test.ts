/** Terminal columns of text, and cuts that fit them without splitting a character. */
import assert from "node:assert/strict";
import {
  cutToWidth,
  displayWidth,
  padToWidth,
} from "../../src/common/display_width.ts";

Deno.test("East Asian Wide and Fullwidth characters and emoji take two columns, marks none", () => {
  const cases: [string, number][] = [
    ["qwen3-8b", 8],
    ["", 0],
    ["通义千问", 8], // CJK ideographs
    ["ひらがなカタカナ", 16], // kana
    ["한국어", 6], // Hangul syllables
    ["ＡＢＣ１", 8], // fullwidth forms
    ["\u{20000}", 2], // CJK extension B: a surrogate pair, one character
    ["e\u0301", 1], // e + combining acute
    ["ñ", 1], // precomposed
    ["😀", 2],
    ["👩‍💻", 2], // a ZWJ sequence is one cluster
    ["🇯🇵", 2], // a flag: two regional indicators, one cluster
    ["a\u200bb", 2], // a zero-width space
    ["Ωμέγα", 5],
    ["…", 1],
  ];
  for (const [text, width] of cases) {
    assert.equal(displayWidth(text), width, JSON.stringify(text));
  }
});

Deno.test("a cut fits its width, ends with …, and falls between characters", () => {
  assert.equal(cutToWidth("backoff (restart in 4s)", 9), "backoff …");
  assert.equal(cutToWidth("short", 9), "short");
  assert.equal(cutToWidth("exactly9!", 9), "exactly9!");
  // A wide character that would straddle the edge goes whole.
  assert.equal(cutToWidth("ab通义", 4), "ab…");
  assert.equal(cutToWidth("通义千问", 6), "通义…");
  assert.equal(cutToWidth("\u{20000}\u{20000}\u{20000}", 4), "\u{20000}…");
  assert.equal(cutToWidth("cafe\u0301s", 5), "cafe\u0301s");
  assert.equal(cutToWidth("cafe\u0301s!", 5), "cafe\u0301…");
  assert.equal(cutToWidth("e\u0301e\u0301e\u0301", 2), "e\u0301…");
  assert.equal(cutToWidth("通义", 1), "…");
  for (const text of ["显存不足 \u{20000}x cafe\u0301 👩‍💻👩‍💻", "ＡＢＣ１２３"]) {
    for (let width = 1; width < displayWidth(text); width++) {
      const cut = cutToWidth(text, width);
      assert.ok(displayWidth(cut) <= width, `${width}: ${cut}`);
      assert.ok(cut.endsWith("…"));
      assert.ok(cut.isWellFormed(), `${width}: a split surrogate pair`);
      assert.ok(text.startsWith(cut.slice(0, -1)), `${width}: ${cut}`);
      assert.doesNotMatch(cut, /(?<!e)\u0301/);
      assert.doesNotMatch(cut, /\u200d…$/, `${width}: a split ZWJ sequence`);
    }
  }
});

Deno.test("padding counts columns, not code units", () => {
  assert.equal(padToWidth("通义", 6), "通义  ");
  assert.equal(padToWidth("e\u0301", 3), "e\u0301  ");
  assert.equal(padToWidth("long", 2), "long");
});
