/**
 * `deno task start` builds its permissions from `$MY_LOCAL`: without it the
 * task says so in one line before Deno or the launcher runs, rather than
 * Deno's `Empty path is not allowed` and a backtrace.
 */
import assert from "node:assert/strict";

const ROOT = new URL("../../", import.meta.url).pathname;

/** `deno task start <args>` in the checkout with only PATH, HOME, DENO_DIR and `env`. */
async function task(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number; stdout: string; stderr: string[] }> {
  const base: Record<string, string> = { NO_COLOR: "1" };
  for (const name of ["PATH", "HOME", "DENO_DIR"]) {
    const value = Deno.env.get(name);
    if (value !== undefined) base[name] = value;
  }
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["task", "--quiet", "start", ...args],
    cwd: ROOT,
    env: { ...base, ...env },
    clearEnv: true,
    stdin: "null",
  }).output();
  const decode = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
  return {
    code: out.code,
    stdout: decode(out.stdout),
    stderr: decode(out.stderr).split("\n").filter(Boolean),
  };
}

const NOT_SET =
  "[serve] error: Cannot start: MY_LOCAL is not set (deno task start may read and write only $MY_LOCAL: export MY_LOCAL=/srv/mymodel, the root holding models/ logs/ metrics/ data/)";

for (
  const [what, env] of [["unset", {}], ["empty", { MY_LOCAL: "" }]] as const
) {
  Deno.test(`deno task start with MY_LOCAL ${what} says what to set in one line and exits 1`, async () => {
    const before = [...Deno.readDirSync(ROOT)].map((e) => e.name).sort();
    const out = await task(["alpha", "--port", "5999"], env);
    assert.equal(out.code, 1);
    assert.deepEqual(out.stderr, [NOT_SET]);
    assert.equal(out.stdout, "");
    const after = [...Deno.readDirSync(ROOT)].map((e) => e.name).sort();
    assert.deepEqual(after, before, "nothing written in the checkout");
  });
}

Deno.test("deno task start with MY_LOCAL set runs the launcher under its permissions", async () => {
  const root = await Deno.makeTempDir({ prefix: "serve-task-" });
  try {
    const out = await task(["--help"], { MY_LOCAL: root });
    assert.equal(out.code, 0, out.stderr.join("\n"));
    assert.match(out.stdout, /^Usage:/m);
    assert.ok(!out.stderr.some((l) => /Empty path|error/i.test(l)));
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("deno task start --directory outside $MY_LOCAL names the flag and says to set MY_LOCAL, not 'no such directory'", async () => {
  const granted = await Deno.makeTempDir({ prefix: "serve-task-" });
  const other = await Deno.makeTempDir({ prefix: "serve-task-" });
  try {
    for (const sub of ["models", "logs", "metrics", "data"]) {
      await Deno.mkdir(`${other}/${sub}`);
    }
    const out = await task(
      ["--dry-run", "--directory", other, "alpha"],
      { MY_LOCAL: granted },
    );
    assert.equal(out.code, 1);
    const said = out.stderr.filter((l) => !/^Info /.test(l));
    assert.deepEqual(said, [
      `[serve] error: Cannot use --directory=${other}: not readable under this run's permissions (expected a directory inside --allow-read; under deno task start, set MY_LOCAL=${other})`,
    ]);
    for (const sub of ["models", "logs", "metrics", "data"]) {
      assert.deepEqual([...Deno.readDirSync(`${other}/${sub}`)], [], sub);
    }
  } finally {
    await Deno.remove(granted, { recursive: true });
    await Deno.remove(other, { recursive: true });
  }
});
