/**
 * The compiled binary: its command line, the one-line failure where `deno
 * compile` cannot fetch its runtime, and the catalogue lookup the binary uses
 * (a module-relative `file:` URL read from the file system, never `fetch`).
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { Registry } from "../../src/catalogue.ts";
import { DEFAULT_CATALOGUE } from "../../src/catalogue/registry.ts";
import { ALLOW_RUN, compileArgs, explainFailure } from "../../tools/compile.ts";

const REPO = fileURLToPath(new URL("../../", import.meta.url));

Deno.test("compile bakes in the narrowed permissions and embeds the catalogue", () => {
  const args = compileArgs({ root: "/srv/mymodel", output: "out/serve" });
  assert.deepEqual(args, [
    "compile",
    "--v8-flags=--max-semi-space-size=2",
    "--allow-net",
    "--allow-env",
    "--allow-run=vllm,llama-server,python3,kill,sh,nvidia-smi,prlimit",
    "--allow-read=/srv/mymodel,/run/credentials,/etc/mymodel/secrets",
    "--allow-write=/srv/mymodel",
    "--include",
    "catalogue/",
    "--output",
    "out/serve",
    "mod.ts",
  ]);
  assert.ok(!args.includes("-A") && !args.includes("--allow-all"));
  assert.equal(ALLOW_RUN.split(",").length, 7);
});

Deno.test("a runtime that cannot be downloaded is explained in one line", () => {
  const stderr = "Compile mod.ts to dist/x\n" +
    "Download https://dl.deno.land/release/v2.9.6/denort-x86_64-unknown-linux-gnu.zip\n" +
    "error: Writing deno compile executable to temporary file 'x.tmp'\n\nCaused by:\n" +
    "    0: Setting up base binary.\n    1: error sending request for url\n";
  const line = explainFailure(stderr);
  assert.ok(!line.includes("\n"));
  assert.match(
    line,
    /^Cannot compile: deno compile could not download its runtime \(https:\/\/dl\.deno\.land\/release\/v2\.9\.6\/denort-x86_64-unknown-linux-gnu\.zip\) .*DENORT_BIN/,
  );
  assert.equal(
    explainFailure('error: Module not found "file:///x/mod.ts".\n'),
    'Cannot compile: Module not found "file:///x/mod.ts".',
  );
});

Deno.test("deno task compile fails with one line where the runtime cannot be fetched", async () => {
  const out = await Deno.makeTempDir({ prefix: "compile-" });
  try {
    const { code, stderr, stdout } = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        "tools/compile.ts",
        "--root",
        "/srv/mymodel",
        "--output",
        `${out}/mymodel-serve`,
      ],
      cwd: REPO,
      // A proxy that refuses: the runtime download fails at once on any machine.
      env: { HTTPS_PROXY: "http://127.0.0.1:9", HTTP_PROXY: "", NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(stderr).trim();
    if (code === 0) {
      // A machine with the runtime already cached builds the binary anyway.
      assert.ok(Deno.statSync(`${out}/mymodel-serve`).isFile);
      assert.match(new TextDecoder().decode(stdout), /compiled /);
      return;
    }
    assert.equal(code, 1);
    assert.equal(text.split("\n").length, 1, text);
    assert.match(text, /^Cannot compile: deno compile could not download/);
  } finally {
    await Deno.remove(out, { recursive: true });
  }
});

Deno.test("the shipped catalogue is read from the file system, not with fetch", async () => {
  const original = globalThis.fetch;
  let fetched = 0;
  globalThis.fetch = function refuse(): Promise<Response> {
    fetched++;
    return Promise.reject(new TypeError("fetch is not available here"));
  };
  try {
    const registry = await Registry.load();
    assert.ok(registry.has("llama-3"));
    assert.equal(registry.file, fileURLToPath(DEFAULT_CATALOGUE));
  } finally {
    globalThis.fetch = original;
  }
  assert.equal(fetched, 0);
});

Deno.test("a copy of the package finds the catalogue beside its own modules, as the binary's embedded tree does", async () => {
  // deno compile keeps the module tree's layout; --include catalogue/ puts the
  // catalogue where ../catalogue/ from src/ points. Reproduce that layout elsewhere.
  const tree = await Deno.makeTempDir({ prefix: "embedded-" });
  try {
    for (const dir of ["src", "catalogue"]) {
      await copyTree(`${REPO}/${dir}`, `${tree}/${dir}`);
    }
    await Deno.copyFile(`${REPO}/deno.json`, `${tree}/deno.json`);
    await Deno.copyFile(`${REPO}/deno.lock`, `${tree}/deno.lock`);
    await Deno.writeTextFile(
      `${tree}/probe.ts`,
      'import { Registry } from "./src/catalogue.ts";\n' +
        "const r = await Registry.load();\n" +
        'console.log(JSON.stringify({ file: r.file, size: r.size, llama: r.has("llama-3") }));\n',
    );
    const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
      // Read access to the copied catalogue only, and no network at all.
      args: [
        "run",
        "--quiet",
        "--allow-env",
        `--allow-read=${tree}/catalogue`,
        "--deny-net",
        `${tree}/probe.ts`,
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(code, 0, new TextDecoder().decode(stderr));
    const found = JSON.parse(new TextDecoder().decode(stdout));
    const shipped = await Registry.load();
    assert.deepEqual(found, {
      file: `${tree}/catalogue/optimizers.yaml`,
      size: shipped.size,
      llama: true,
    });
  } finally {
    await Deno.remove(tree, { recursive: true });
  }
});

/** Copies a folder with its subfolders (src/ has one per subsystem). */
async function copyTree(from: string, to: string): Promise<void> {
  await Deno.mkdir(to);
  for await (const entry of Deno.readDir(from)) {
    if (entry.isDirectory) {
      await copyTree(`${from}/${entry.name}`, `${to}/${entry.name}`);
    } else await Deno.copyFile(`${from}/${entry.name}`, `${to}/${entry.name}`);
  }
}
