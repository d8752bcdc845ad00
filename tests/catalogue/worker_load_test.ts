/**
 * A reload's catalogue read in a Worker (`src/catalogue/worker_load.ts`):
 * the same registry as `Registry.load`, a refusal as the same error with its
 * fields, a registry through `toParsed`/`fromParsed` equal to its source, and
 * one warning line where no worker may run.
 */
import assert from "node:assert/strict";
import {
  CatalogueError,
  KeyError,
  Registry,
  UnsetVariableError,
} from "../../src/catalogue.ts";
import { loadInWorker } from "../../src/catalogue/worker_load.ts";
import { errorData, revivedError } from "../../src/catalogue/load_message.ts";

const CARDS = `models:
  ds:
    verb: chat
    hub: org/ds
    engine: sglang
    args: { node-rank: "\${NODE_RANK}", enable-x: true }
    env: { A: "\${A}" }
  cmd:
    verb: embed
    engine: command
    local: cmd
    command: [serve, "{model}", "\${B}"]
`;

async function tempFile(text: string): Promise<string> {
  const path = await Deno.makeTempFile({ suffix: ".yaml" });
  await Deno.writeTextFile(path, text);
  return path;
}

Deno.test("toParsed/fromParsed: a structured clone becomes the same registry, frozen, expandable", () => {
  const registry = Registry.parse(CARDS, "x.yaml");
  const copy = Registry.fromParsed(structuredClone(registry.toParsed()));
  assert.equal(copy.file, "x.yaml");
  assert.deepEqual([...copy], [...registry]);
  const card = copy.get("ds");
  assert.ok(Object.isFrozen(card) && Object.isFrozen(card.args));
  assert.ok(Object.isFrozen(card.env) && Object.isFrozen(card.modality));
  assert.ok(Object.isFrozen(copy.get("cmd").command));
  assert.deepEqual(
    copy.expand(card, { NODE_RANK: "1", A: "a" }),
    registry.expand(registry.get("ds"), { NODE_RANK: "1", A: "a" }),
  );
  assert.throws(
    () => copy.expand(copy.get("cmd"), {}),
    (e) => e instanceof UnsetVariableError && e.field === "command[2]",
  );
});

Deno.test("loadInWorker: the same registry as Registry.load; the shipped one still says so", async () => {
  const path = await tempFile(CARDS);
  try {
    const [inWorker, direct] = [
      await loadInWorker(path),
      await Registry.load(path),
    ];
    assert.equal(inWorker.file, direct.file);
    assert.deepEqual([...inWorker], [...direct]);
  } finally {
    await Deno.remove(path);
  }
  const shipped = await loadInWorker();
  assert.equal(shipped.size, (await Registry.load()).size);
  assert.throws(() => shipped.get("nope"), /not in the shipped catalogue/);
});

Deno.test("loadInWorker: a refusal is the same error, class, message and fields", async () => {
  const path = await tempFile("models:\n  x:\n    verb: talk\n    hub: a/b\n");
  try {
    for (const source of [path, `${path}.missing`, "ftp://host/c.yaml"]) {
      const direct = await Registry.load(source).catch((e) => e);
      const worker = await loadInWorker(source).catch((e) => e);
      assert.ok(worker instanceof CatalogueError, String(worker));
      assert.equal(worker.name, "CatalogueError");
      assert.equal(worker.message, direct.message);
      for (const field of ["file", "card", "field", "line"] as const) {
        assert.equal(worker[field], direct[field], field);
      }
    }
    const bad = await loadInWorker(path).catch((e) => e);
    assert.deepEqual([bad.card, bad.field, bad.line], ["x", "verb", 3]);
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("revivedError: KeyError and UnsetVariableError keep their class and fields", () => {
  const key = new KeyError("lama-3", ["llama-3"], { catalogue: "c.yaml" });
  const back = revivedError(structuredClone(errorData(key)));
  assert.ok(back instanceof KeyError);
  assert.equal(back.message, key.message);
  assert.deepEqual(
    [back.model, back.suggestions, back.catalogue],
    ["lama-3", ["llama-3"], "c.yaml"],
  );
  const unset = new UnsetVariableError("c.yaml", "ds", {
    field: "args.x",
    line: 4,
  }, "X");
  const again = revivedError(structuredClone(errorData(unset)));
  assert.ok(again instanceof UnsetVariableError);
  assert.equal(again.message, unset.message);
  assert.equal(again.variable, "X");
  const other = revivedError(structuredClone(errorData(new TypeError("t"))));
  assert.deepEqual([other.name, other.message], ["TypeError", "t"]);
});

Deno.test("loadInWorker without read access to the modules: a direct load and one warning line, once", async () => {
  const dir = await Deno.makeTempDir({ prefix: "worker-load-" });
  try {
    const module = new URL(
      "../../src/catalogue/worker_load.ts",
      import.meta.url,
    );
    await Deno.writeTextFile(
      `${dir}/probe.ts`,
      `import { loadInWorker } from "${module.href}";\n` +
        "for (let i = 0; i < 2; i++) console.log((await loadInWorker()).size);\n",
    );
    const catalogue = new URL("../../catalogue/", import.meta.url).pathname;
    const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--quiet",
        "--config",
        new URL("../../deno.json", import.meta.url).pathname,
        "--allow-env",
        `--allow-read=${catalogue}`,
        `${dir}/probe.ts`,
      ],
      env: { NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const err = new TextDecoder().decode(stderr).trim();
    assert.equal(code, 0, err);
    const size = String((await Registry.load()).size);
    assert.deepEqual(new TextDecoder().decode(stdout).trim().split("\n"), [
      size,
      size,
    ]);
    assert.equal(err.split("\n").length, 1, err);
    assert.match(
      err,
      /^\[serve\] warn: catalogue worker unavailable \(no read permission for .*\/src\/ \(expected --allow-read to include the launcher's modules\)\): reloads read the catalogue on the management API's event loop, which waits for the parse$/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
