import assert from "node:assert/strict";
import { printable } from "../../src/common/printable.ts";

Deno.test("printable keeps an engine's words and printable Unicode as they are", () => {
  for (
    const text of [
      "",
      "ValueError: max_model_len (8192) is greater than 4096",
      "tab\tkept, émigré, 模型, 🦙, ¿qué?",
    ]
  ) assert.equal(printable(text), text);
});

Deno.test("printable removes whole OSC sequences: retitle, clipboard, hyperlink", () => {
  assert.equal(printable("a\x1b]0;pwned\x07b"), "ab");
  assert.equal(printable("a\x1b]52;c;ZXZpbA==\x1b\\b"), "ab");
  assert.equal(
    printable("\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\"),
    "link",
  );
  assert.equal(printable("a\x9d0;title\x9cb"), "ab", "8-bit OSC and ST");
  assert.equal(printable("a\x1b]0;never ends"), "a", "unterminated");
  assert.equal(printable("a\x1bP1$r\x1b\\b"), "ab", "DCS");
});

Deno.test("printable removes CSI sequences, other escapes and control characters", () => {
  assert.equal(printable("\x1b[2J\x1b[H\x1b[1;31mred\x1b[0m"), "red");
  assert.equal(printable("a\x1b[?25lb\x1b[10;20Hc"), "abc");
  assert.equal(printable("a\x9b2Jb"), "ab", "8-bit CSI");
  assert.equal(printable("a\x1b7b\x1b(Bc\x1bcd"), "abcd");
  assert.equal(
    printable("nul\x00bell\x07del\x7fc1\x85end\x1b"),
    "nulbelldelc1end",
  );
  assert.equal(
    printable("a\x1b[12"),
    "a12",
    "an unfinished CSI loses its introducer",
  );
});

Deno.test("printable turns line breaks into a space: no faked [serve] line", () => {
  assert.equal(
    printable("CUDA error\r\n[serve] info: all engines ready"),
    "CUDA error [serve] info: all engines ready",
  );
  assert.equal(
    printable("ok\r\x1b[2K[serve] error: fake"),
    "ok [serve] error: fake",
  );
});
