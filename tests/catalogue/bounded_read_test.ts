/**
 * A catalogue file is read only when it is a regular file of at most 16 MiB:
 * a FIFO, a device or a directory is refused at once, in one line naming it
 * and what was expected, before it is opened (opening a FIFO blocks).
 */
import assert from "node:assert/strict";
import { CatalogueError, Registry } from "../../src/catalogue.ts";

/** The CatalogueError `promise` rejects with; still pending after 2 s (blocked, as in an open): `undefined`. */
async function refusal(
  promise: Promise<unknown>,
): Promise<{ error: CatalogueError } | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const pending = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), 2_000);
  });
  try {
    await Promise.race([promise.then(() => assert.fail("loaded")), pending]);
    return undefined;
  } catch (error) {
    assert.ok(error instanceof CatalogueError, String(error));
    assert.ok(!/[\r\n]/.test(error.message), error.message);
    return { error };
  } finally {
    clearTimeout(timer);
  }
}

const EXPECTED =
  "(expected a regular file holding the catalogue's YAML, or an http:, https: or file: URL)";

Deno.test("a FIFO named as catalogue is refused at once, in one line, never opened", async () => {
  const dir = Deno.makeTempDirSync();
  const fifo = `${dir}/catalogue.yaml`;
  try {
    const made = await new Deno.Command("mkfifo", { args: [fifo] }).output();
    assert.ok(made.success);
    for (const source of [fifo, new URL(`file://${fifo}`)]) {
      const loading = Registry.load(source);
      const refused = await refusal(loading);
      if (refused === undefined) {
        // Blocked in open (as it used to): a writer lets it go, then the test fails.
        (await Deno.open(fifo, { write: true })).close();
        await loading.catch(() => {});
        assert.fail("the load of a FIFO was still blocked after 2 s");
      }
      assert.equal(
        refused.error.message,
        `Cannot load catalogue ${fifo}: it is a FIFO ${EXPECTED}`,
      );
    }
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("a device or a directory named as catalogue is refused in one line naming what it is", async () => {
  const dir = Deno.makeTempDirSync();
  try {
    for (
      const [source, what] of [
        ["/dev/null", "a character device"],
        [dir, "a directory"],
      ]
    ) {
      const refused = await refusal(Registry.load(source!));
      assert.ok(refused, `${source} was not refused within 2 s`);
      assert.equal(
        refused.error.message,
        `Cannot load catalogue ${source}: it is ${what} ${EXPECTED}`,
      );
    }
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("/dev/zero as catalogue is refused at once, the launcher not growing", async () => {
  const rss = Deno.memoryUsage().rss;
  const refused = await refusal(Registry.load("/dev/zero"));
  assert.ok(refused, "/dev/zero was not refused within 2 s");
  assert.equal(
    refused.error.message,
    `Cannot load catalogue /dev/zero: it is a character device ${EXPECTED}`,
  );
  const grew = (Deno.memoryUsage().rss - rss) / 1024 / 1024;
  assert.ok(grew < 32, `grew by ${grew.toFixed(0)} MiB`);
});

Deno.test("a catalogue file over 16 MiB is refused by its size, unread", async () => {
  const dir = Deno.makeTempDirSync();
  const path = `${dir}/big.yaml`;
  try {
    Deno.writeTextFileSync(path, "models:\n  m: { verb: chat, hub: org/m }\n");
    // Sparse: no disk taken, and its zeros are no YAML, so a read would say so.
    Deno.truncateSync(path, 16 * 1024 * 1024 + 1);
    const refused = await refusal(Registry.load(path));
    assert.ok(refused);
    assert.equal(
      refused.error.message,
      `Cannot load catalogue ${path}: it holds 16777217 bytes, more than 16 MiB (expected a catalogue of at most 16 MiB)`,
    );
    // A file at the cap is read as before.
    Deno.writeTextFileSync(
      path,
      `models:\n  m: { verb: chat, hub: org/m }\n#${" ".repeat(1024)}\n`,
    );
    assert.ok((await Registry.load(path)).has("m"));
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});
