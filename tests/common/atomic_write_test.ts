import assert from "node:assert/strict";
import {
  writeFileAtomic,
  writeFileAtomicSync,
} from "../../src/common/atomic_write.ts";

/** crypto.getRandomValues filling with `bytes` first, one byte per call, then random. */
function drawing(bytes: number[]): typeof crypto.getRandomValues {
  const random = crypto.getRandomValues.bind(crypto);
  function draw(array: Uint8Array): Uint8Array {
    const byte = bytes.shift();
    return byte === undefined ? random(array) : array.fill(byte);
  }
  return draw as unknown as typeof crypto.getRandomValues;
}

function names(dir: string): string[] {
  return [...Deno.readDirSync(dir)].map((entry) => entry.name).sort();
}

Deno.test("writeFileAtomic replaces the file whole and leaves no temporary file", async () => {
  const dir = Deno.makeTempDirSync();
  try {
    await writeFileAtomic(`${dir}/a.json`, "one\n", { mode: 0o644 });
    writeFileAtomicSync(`${dir}/a.json`, "two\n");
    await writeFileAtomic(`${dir}/a.json`, "three\n", { mode: 0o644 });
    assert.equal(Deno.readTextFileSync(`${dir}/a.json`), "three\n");
    assert.equal(Deno.statSync(`${dir}/a.json`).mode! & 0o777, 0o644);
    assert.deepEqual(names(dir), ["a.json"]);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("writeFileAtomic never writes through a link planted at its temporary name: it takes another", async () => {
  const dir = Deno.makeTempDirSync();
  const random = crypto.getRandomValues;
  try {
    Deno.writeTextFileSync(`${dir}/victim`, "precious\n");
    // The first names drawn are taken by planted links; the next are free.
    const planted = [0x11, 0x22];
    for (const byte of planted) {
      const hex = byte.toString(16).repeat(8);
      Deno.symlinkSync(`${dir}/victim`, `${dir}/.a.prom.${hex}.tmp`);
      Deno.symlinkSync(`${dir}/victim`, `${dir}/.b.prom.${hex}.tmp`);
    }
    for (const write of [writeFileAtomic, writeFileAtomicSync]) {
      const queue = [...planted];
      crypto.getRandomValues = drawing(queue);
      const name = write === writeFileAtomic ? "a.prom" : "b.prom";
      await write(`${dir}/${name}`, "new\n");
      assert.equal(queue.length, 0, "both planted names were tried");
      assert.equal(Deno.readTextFileSync(`${dir}/${name}`), "new\n");
      assert.ok(Deno.lstatSync(`${dir}/${name}`).isFile);
    }
    assert.equal(Deno.readTextFileSync(`${dir}/victim`), "precious\n");
    assert.equal(names(dir).length, 7, "the planted links stay, nothing else");
  } finally {
    crypto.getRandomValues = random;
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("writeFileAtomic gives up after 8 taken names, and removes its temporary file when the rename fails", async () => {
  const dir = Deno.makeTempDirSync();
  const random = crypto.getRandomValues;
  try {
    Deno.symlinkSync(`${dir}/nowhere`, `${dir}/.a.${"00".repeat(8)}.tmp`);
    crypto.getRandomValues = drawing(new Array(16).fill(0));
    await assert.rejects(
      writeFileAtomic(`${dir}/a`, "x"),
      Deno.errors.AlreadyExists,
    );
    assert.throws(
      () => writeFileAtomicSync(`${dir}/a`, "x"),
      Deno.errors.AlreadyExists,
    );
    crypto.getRandomValues = random;
    Deno.mkdirSync(`${dir}/b/blocker`, { recursive: true });
    await assert.rejects(writeFileAtomic(`${dir}/b`, "x"));
    assert.throws(() => writeFileAtomicSync(`${dir}/b`, "x"));
    assert.deepEqual(names(dir), [`.a.${"00".repeat(8)}.tmp`, "b"]);
  } finally {
    crypto.getRandomValues = random;
    Deno.removeSync(dir, { recursive: true });
  }
});
