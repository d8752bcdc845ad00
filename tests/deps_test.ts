/**
 * The launcher pulls only what it runs: with an empty Deno cache, running the
 * CLI from a checkout (`deno run`, `deno task start`, and `deno install
 * --entrypoint mod.ts`) downloads only the npm packages in mod.ts's own module
 * graph, never the packages tests, tools and benchmarks use (those live in
 * deno.dev.json), and leaves deno.lock as it is. Needs the npm registry
 * (reachable here and in CI).
 */
import assert from "node:assert/strict";

const ROOT = new URL("..", import.meta.url).pathname;
/** Packages only tests, tools, bench or deploy checks import. */
const NOT_RUNTIME = [
  "openai",
  "@huggingface/gguf",
  "kubernetes-models",
  "parse-prometheus-text-format",
  "ajv",
];

async function deno(args: string[], denoDir: string): Promise<string> {
  const out = await new Deno.Command(Deno.execPath(), {
    args,
    cwd: ROOT,
    // deno task start reads $MY_LOCAL for its --allow-read list.
    env: { DENO_DIR: denoDir, NO_COLOR: "1", MY_LOCAL: ROOT },
    stdin: "null",
    signal: AbortSignal.timeout(120_000),
  }).output();
  const stdout = new TextDecoder().decode(out.stdout);
  assert.equal(
    out.code,
    0,
    `deno ${args.join(" ")}: ${new TextDecoder().decode(out.stderr)}`,
  );
  return stdout;
}

/** The npm packages in a Deno cache, as `name` (scoped: `@scope/name`). */
function cachedPackages(denoDir: string): string[] {
  const names: string[] = [];
  const npm = `${denoDir}/npm`;
  for (const registry of Deno.readDirSync(npm)) {
    if (!registry.isDirectory) continue;
    for (const entry of Deno.readDirSync(`${npm}/${registry.name}`)) {
      if (!entry.isDirectory) continue;
      if (entry.name.startsWith("@")) {
        for (
          const scoped of Deno.readDirSync(
            `${npm}/${registry.name}/${entry.name}`,
          )
        ) names.push(`${entry.name}/${scoped.name}`);
      } else names.push(entry.name);
    }
  }
  return names.sort();
}

/**
 * The npm packages mod.ts's module graph imports, with their dependencies, by
 * name (`npmPackages` alone lists the whole lock file).
 */
async function runtimePackages(denoDir: string): Promise<string[]> {
  const info = JSON.parse(await deno(["info", "--json", "mod.ts"], denoDir));
  const packages = info.npmPackages as Record<
    string,
    { name: string; dependencies: string[] }
  >;
  const todo: string[] = (info.modules as { npmPackage?: string }[])
    .flatMap((module) => module.npmPackage ?? []);
  const names = new Set<string>();
  const seen = new Set<string>();
  for (let id = todo.pop(); id !== undefined; id = todo.pop()) {
    if (seen.has(id)) continue;
    seen.add(id);
    const pkg = packages[id];
    assert.ok(pkg, `${id} is not in deno info's npmPackages`);
    names.add(pkg.name);
    todo.push(...pkg.dependencies);
  }
  return [...names].sort();
}

for (
  const [what, args] of [
    ["deno run -A mod.ts --help", ["run", "-A", "mod.ts", "--help"]],
    ["deno task start --help", ["task", "start", "--help"]],
    ["deno install --entrypoint mod.ts", [
      "install",
      "--entrypoint",
      "mod.ts",
    ]],
  ] as const
) {
  Deno.test(`${what} with an empty cache downloads only the launcher's npm packages`, async () => {
    const denoDir = await Deno.makeTempDir({ prefix: "serve-deno-dir-" });
    const lock = await Deno.readTextFile(`${ROOT}/deno.lock`);
    try {
      await deno([...args], denoDir);
      assert.equal(await Deno.readTextFile(`${ROOT}/deno.lock`), lock);
      const downloaded = cachedPackages(denoDir);
      const runtime = await runtimePackages(denoDir);
      assert.deepEqual(downloaded, runtime);
      assert.deepEqual(runtime, ["jose", "yaml"]);
      for (const name of NOT_RUNTIME) assert.ok(!downloaded.includes(name));
    } finally {
      await Deno.remove(denoDir, { recursive: true });
    }
  });
}
