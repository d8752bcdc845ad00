/**
 * An operator's mistakes through the CLI (issue 31, items 1, 4, 5, 6 and the
 * smaller ones): each is one line naming the input and what was expected,
 * with the exit code the docs give; nothing is started, listened on or
 * written. Where the mistake was the launcher's (a stale variable beating a
 * flag), the start now proceeds.
 */
import assert from "node:assert/strict";
import {
  fakeBin,
  freePorts,
  launch,
  Launcher,
  listDir,
  listening,
  makeRoot,
  pathWith,
  recordNames,
  siteArgs,
  STAND_IN_CATALOGUE,
  waitFor,
} from "../support/helpers.ts";
import { catalogueFile, refused } from "../support/refusals.ts";

/** A dry run of `models` with `env` and `extra`; its exit code, stdout and stderr. */
async function dryRun(
  models: string[],
  extra: string[],
  env: Record<string, string>,
) {
  const root = await makeRoot();
  const bin = await fakeBin();
  try {
    await using run = new Launcher(
      [...models, ...siteArgs(freePorts(1), root), ...extra, "--dry-run"],
      { PATH: pathWith(bin), NUCLEUS_MODE: "dev", ...env },
    );
    const status = await run.exited();
    return {
      code: status.code,
      stdout: run.stdout.join("\n"),
      stderr: run.stderr,
      logs: listDir(`${root}/logs`),
    };
  } finally {
    for (const dir of [root, bin]) {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  }
}

// Item 1: the root's subdirectories.

Deno.test("logs/ that is a file is named as a file, not told to mkdir -p", async () => {
  await refused(
    ["alpha"],
    /^\[serve\] error: Cannot use root directory \S+: logs is a file, not a directory \(expected a directory: move the file away, then mkdir \S+\/logs\)$/,
    {
      root: async (root) => {
        await Deno.remove(`${root}/logs`);
        await Deno.writeTextFile(`${root}/logs`, "");
      },
    },
  );
});

Deno.test({
  name:
    "a root the service user cannot write: start and dry run refuse naming logs/ (run as an unprivileged user)",
  ignore: Deno.uid() !== 0,
  async fn() {
    // The unprivileged user cannot read root's DENO_DIR nor its Deno binary:
    // it runs a hard link of the binary (not a copy) and the launcher bundled
    // into one file, with an empty DENO_DIR of its own.
    const tools = await Deno.makeTempDir({ prefix: "serve-nobody-" });
    const root = await makeRoot();
    try {
      await Deno.chmod(tools, 0o777);
      await Deno.chmod(root, 0o755);
      for (const sub of ["models", "logs", "metrics", "data"]) {
        await Deno.chmod(`${root}/${sub}`, 0o755);
      }
      try {
        await Deno.link(Deno.execPath(), `${tools}/deno`);
      } catch (error) {
        console.warn(`skipped: cannot link the Deno binary (${error})`);
        return;
      }
      const mod = new URL("../../mod.ts", import.meta.url).pathname;
      const bundle = await new Deno.Command(Deno.execPath(), {
        args: ["bundle", "--quiet", "-o", `${tools}/mod.js`, mod],
        stdout: "null",
        stderr: "piped",
      }).output();
      assert.equal(bundle.code, 0, new TextDecoder().decode(bundle.stderr));
      const catalogue = `${tools}/catalogue.yaml`;
      await Deno.copyFile(STAND_IN_CATALOGUE, catalogue);
      const run = async (extra: string[]) => {
        const out = await new Deno.Command("setpriv", {
          args: [
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            `${tools}/deno`,
            "run",
            "-A",
            "--quiet",
            `${tools}/mod.js`,
            "alpha",
            ...siteArgs(freePorts(1), root, catalogue),
            ...extra,
          ],
          env: { DENO_DIR: `${tools}/deno_dir`, HOME: tools, NO_COLOR: "1" },
          clearEnv: true,
          stdout: "null",
          stderr: "piped",
        }).output();
        return {
          code: out.code,
          lines: new TextDecoder().decode(out.stderr).trim().split("\n"),
        };
      };
      for (const extra of [[], ["--dry-run"]]) {
        const { code, lines } = await run(extra);
        assert.equal(code, 1, lines.join("\n"));
        assert.equal(lines.length, 1, lines.join("\n"));
        assert.match(
          lines[0]!,
          /^\[serve\] error: Cannot use root directory \S+: logs\/ is not writable by the launcher's user \(Permission denied \(os error 13\)\) \(expected a directory it can write: /,
        );
      }
      for (const sub of ["logs", "data", "metrics"]) {
        assert.deepEqual(listDir(`${root}/${sub}`), [], `nothing in ${sub}/`);
      }
    } finally {
      for (const dir of [tools, root]) {
        await Deno.remove(dir, { recursive: true }).catch(() => {});
      }
    }
  },
});

Deno.test("a reload checks the root as a start does: metrics/ become a file is refused, the launcher keeps serving", async () => {
  await using s = await launch(["alpha"]);
  await s.launcher.ready();
  await Deno.rename(`${s.root}/metrics`, `${s.root}/metrics.moved`);
  await Deno.writeTextFile(`${s.root}/metrics`, "");
  s.launcher.child.kill("SIGHUP");
  const line = await s.launcher.waitForLine(/reload refused: /);
  assert.match(
    line,
    /reload refused: Cannot use root directory \S+: metrics is a file, not a directory \(expected a directory: move the file away, then mkdir \S+\/metrics\)$/,
  );
  assert.ok(await listening(s.port), "still serving");
  assert.equal(s.launcher.status, undefined, "still running");
});

// Item 4: early signals.

/** The stand-in catalogue, its answers held until `release`: it holds a start in its checks. */
function heldCatalogue() {
  let asked = 0;
  let arrived = Promise.withResolvers<void>();
  const released = Promise.withResolvers<void>();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    async () => {
      asked++;
      arrived.resolve();
      await released.promise;
      return new Response(await Deno.readTextFile(STAND_IN_CATALOGUE));
    },
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}/catalogue.yaml`,
    /** Resolves once `n` launchers have asked for it. */
    async asked(n: number): Promise<void> {
      while (asked < n) {
        await arrived.promise;
        arrived = Promise.withResolvers();
      }
    },
    get count(): number {
      return asked;
    },
    /** Every answer held so far, and every later one, goes out. */
    release: () => released.resolve(),
    async [Symbol.asyncDispose]() {
      released.resolve();
      await server.shutdown();
    },
  };
}

/**
 * The launcher starting `alpha` from `catalogue` (`--dry-run` in `extra`),
 * signalled `ms` after it asked for the catalogue.
 */
async function signalledAt(
  signal: Deno.Signal,
  ms: number,
  catalogue: ReturnType<typeof heldCatalogue>,
  extra: string[] = [],
) {
  const root = await makeRoot();
  const bin = await fakeBin();
  const records = await Deno.makeTempDir({ prefix: "serve-rec-" });
  const port = freePorts(1);
  const before = catalogue.count;
  const launcher = new Launcher(
    ["alpha", ...siteArgs(port, root, catalogue.url), ...extra],
    {
      PATH: pathWith(bin),
      FAKE_ENGINE_RECORD_DIR: records,
      NUCLEUS_MODE: "dev",
    },
  );
  // Its checks have begun (its listeners were installed before them) and
  // wait on the catalogue, held until the test lets it go.
  await catalogue.asked(before + 1);
  await new Promise((resolve) => setTimeout(resolve, ms));
  launcher.child.kill(signal);
  return {
    launcher,
    root,
    records,
    port,
    async [Symbol.asyncDispose]() {
      await launcher.stop();
      for (const dir of [root, bin, records]) {
        await Deno.remove(dir, { recursive: true }).catch(() => {});
      }
    },
  };
}

// The first ~0.1 s, while Deno loads the module graph, stays the signal's
// default action (docs/cli.md): the tests signal once the catalogue is asked
// for, never after a guessed delay.

Deno.test("SIGTERM during the start-up checks: exit 0, one line, nothing started", async () => {
  await using slow = heldCatalogue();
  for (const ms of [0, 600]) {
    await using run = await signalledAt("SIGTERM", ms, slow);
    const status = await run.launcher.exited();
    assert.equal(status.code, 0, run.launcher.stderr);
    assert.deepEqual(run.launcher.lines.filter((l) => l.trim()), [
      "[serve] stopped during start-up (SIGTERM): nothing left running",
    ]);
    assert.deepEqual(listDir(run.records), [], "no engine started");
    for (const sub of ["logs", "data", "metrics"]) {
      assert.deepEqual(listDir(`${run.root}/${sub}`), [], `nothing in ${sub}/`);
    }
    assert.ok(!(await listening(run.port)), "nothing listens");
  }
});

Deno.test("SIGHUP during a dry run's checks is ignored: the plan comes out, exit 0", async () => {
  await using slow = heldCatalogue();
  await using run = await signalledAt("SIGHUP", 0, slow, ["--dry-run"]);
  slow.release();
  const status = await run.launcher.exited();
  assert.equal(status.code, 0, run.launcher.stderr);
  assert.match(run.launcher.stdout.join("\n"), /alpha/);
  assert.deepEqual(listDir(`${run.root}/logs`), []);
});

Deno.test("SIGHUP during a start's checks does not end it: it starts and serves", async () => {
  await using slow = heldCatalogue();
  await using run = await signalledAt("SIGHUP", 0, slow);
  slow.release();
  await waitFor(() => listening(run.port), "the API to listen", 20_000);
  assert.equal(run.launcher.status, undefined, "still running");
  const status = await run.launcher.stop();
  assert.equal(status.code, 0, run.launcher.stderr);
});

Deno.test("SIGTERM while a killed launcher's engine is being reaped: the reaping finishes, exit 0, engine and record gone", async () => {
  const root = await makeRoot();
  const bin = await fakeBin();
  // An engine left by a killed launcher, in its own group, ignoring SIGTERM:
  // only the reaping's SIGKILL, after --grace, ends it.
  const leftover = new Deno.Command("sh", {
    args: ["-c", 'trap "" TERM; exec sleep 60'],
    stdin: "null",
    stdout: "null",
    stderr: "null",
    detached: true,
  }).spawn();
  const port = freePorts(1);
  try {
    await new Promise((resolve) => setTimeout(resolve, 200));
    const stat = await Deno.readTextFile(`/proc/${leftover.pid}/stat`);
    const startTime = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]!;
    await Deno.writeTextFile(
      `${root}/data/alpha.engine.json`,
      JSON.stringify({
        model: "alpha",
        pid: leftover.pid,
        startTime,
        command: "vllm serve org/alpha",
        host: "127.0.0.1",
        port: port + 1,
        launcherPid: 999_999_999,
        launcherStartTime: "1",
      }),
    );
    await using launcher = new Launcher(
      ["alpha", ...siteArgs(port, root), "--grace", "2"],
      { PATH: pathWith(bin), NUCLEUS_MODE: "dev" },
    );
    await launcher.waitForLine(/outlived its launcher .*: stopping it/);
    launcher.child.kill("SIGTERM");
    const status = await launcher.exited();
    assert.equal(status.code, 0, launcher.stderr);
    assert.equal(
      launcher.lines.filter((l) => l.trim()).at(-1),
      "[serve] stopped during start-up (SIGTERM): nothing left running",
    );
    const ended = await Promise.race([
      leftover.status.then(() => true),
      new Promise((resolve) => setTimeout(() => resolve(false), 5_000)),
    ]);
    assert.ok(ended, "the leftover engine was stopped");
    assert.deepEqual(recordNames(root), [], "its record removed");
    assert.deepEqual(listDir(`${root}/logs`), [], "no engine started");
    assert.ok(!(await listening(port)), "nothing listens");
  } finally {
    try {
      Deno.kill(-leftover.pid, "SIGKILL");
    } catch { /* already gone */ }
    await leftover.status;
    for (const dir of [root, bin]) {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  }
});

// Item 5: launcher-owned flags in a card's args.

for (
  const [engine, args, flag] of [
    ["vllm", "{ port: 29999 }", "--port"],
    ["vllm", "{ host: 0.0.0.0 }", "--host"],
    ["vllm", "{ served-model-name: other }", "--served-model-name"],
    ["vllm", "{ api_key: sekrit }", "--api_key"],
    ["vllm", "{ model: org/other }", "--model"],
    ["llama.cpp", "{ alias: other }", "--alias"],
    ["llama.cpp", "{ -m: /x.gguf }", "-m"],
    ["llama.cpp", "{ -hf: org/other }", "-hf"],
    ["sglang", "{ model-path: org/other }", "--model-path"],
  ]
) {
  Deno.test(`a ${engine} card whose args set ${flag} is refused naming the card and field`, async () => {
    await using file = await catalogueFile(
      `models:\n  m: { verb: chat, hub: org/m, engine: ${engine}, executable: vllm, args: ${args} }\n`,
    );
    const line = await refused(
      ["m"],
      new RegExp(
        `^\\[serve\\] error: Cannot prepare m: card 'm', field 'args' sets ${flag}, which the launcher sets \\(expected none of --host, --port, --api-key, `,
      ),
      { catalogue: file.path },
    );
    assert.doesNotMatch(line, /sekrit/);
  });
}

Deno.test("a command card's own --api-key is masked in the plan, as text and as JSON", async () => {
  await using file = await catalogueFile(
    `models:\n  m: { verb: chat, hub: org/m, engine: command, command: [vllm, --port, "{port}", --api-key, s3cr3t-own], args: [--api-key=s3cr3t-arg] }\n`,
  );
  for (const extra of [[], ["--json"]]) {
    const { code, stdout, stderr } = await dryRun(
      ["m"],
      ["--catalogue", file.path, ...extra],
      {},
    );
    assert.equal(code, 0, stderr);
    assert.doesNotMatch(stdout, /s3cr3t/);
    assert.match(stdout, /\*\*\*/);
  }
});

// Item 6: the flag wins over the environment.

Deno.test("a stale MY_LOCAL or NUCLEUS_PORT does not refuse a start that passes --directory and --port", async () => {
  const { code, stderr } = await dryRun(["alpha"], [], {
    MY_LOCAL: "/nowhere",
    NUCLEUS_PORT: "abc",
  });
  assert.equal(code, 0, stderr);
});

Deno.test("a bad NUCLEUS_PORT without --port is an input error: exit 1, one line", async () => {
  const root = await makeRoot();
  try {
    await using run = new Launcher(["alpha", "--directory", root], {
      NUCLEUS_PORT: "abc",
    });
    const status = await run.exited();
    assert.equal(status.code, 1);
    assert.deepEqual(run.lines.filter((l) => l.trim()), [
      '[serve] error: Cannot use NUCLEUS_PORT="abc": expected an integer from 1 to 65535',
    ]);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

// The smaller items.

Deno.test("--grace -1 and -port are worded, exit 2", async () => {
  await refused(
    ["alpha"],
    /^\[serve\] error: Cannot use --grace=-1: expected 0 or a decimal number of seconds from 0\.001 to 2147483\.647 \(a timer holds at most 2\^31-1 ms, about 24\.8 days\) \(see --help\)$/,
    { extra: ["--grace", "-1"], code: 2 },
  );
  await refused(
    ["alpha"],
    /^\[serve\] error: Cannot parse the command line: Unknown option '-port'; did you mean --port\? \(see --help\)$/,
    { extra: ["-port", "5000"], code: 2 },
  );
});

Deno.test("an executable: that is a directory or not executable is said to be so, not 'not on PATH'", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/plain`, "#!/bin/sh\n", { mode: 0o644 });
    await using file = await catalogueFile(
      `models:\n  d: { verb: chat, hub: org/d, executable: ${dir} }\n  f: { verb: chat, hub: org/f, executable: ${dir}/plain }\n`,
    );
    await refused(
      ["d"],
      /^\[serve\] error: Cannot prepare d: the vllm engine's executable '\S+' is a directory \(expected an executable file: /,
      { catalogue: file.path },
    );
    await refused(
      ["f"],
      /^\[serve\] error: Cannot prepare f: the vllm engine's executable '\S+\/plain' is not executable \(mode 644\) \(expected an executable file: /,
      { catalogue: file.path },
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("--dry-run --json that refuses prints {ok: false, error} on stdout and the line on stderr", async () => {
  const { code, stdout, stderr } = await dryRun(["alpha"], ["--json"], {
    CUDA_VISIBLE_DEVICES: "zero,one",
  });
  assert.equal(code, 1);
  const line = stderr.trim().replace(/^\[serve\] error: /, "");
  assert.deepEqual(JSON.parse(stdout), { ok: false, error: line });
});

Deno.test("CUDA_VISIBLE_DEVICES=zero,one is refused as a pool", async () => {
  await refused(
    ["alpha"],
    /^\[serve\] error: Cannot use CUDA_VISIBLE_DEVICES=zero,one: entry 'zero' is not a device \(expected device indices such as 0,1 or GPU-\/MIG- UUIDs; or pass --gpus\)$/,
    { env: { CUDA_VISIBLE_DEVICES: "zero,one" } },
  );
});

Deno.test("a production refusal chosen by NUCLEUS_MODE=DEV says the value and the rule", async () => {
  await refused(
    ["alpha"],
    /^\[serve\] error: Cannot start in production mode: IDP_SECRET and IDP_ISSUER must be set and non-empty \(or run with --dev_mode\); production mode because NUCLEUS_MODE=DEV \(only a value starting with lowercase "dev" means development\)$/,
    { env: { NUCLEUS_MODE: "DEV", IDP_SECRET: "", IDP_ISSUER: "" } },
  );
});

Deno.test("--version prints the package's version and exits 0", async () => {
  const { version } = JSON.parse(
    await Deno.readTextFile(new URL("../../deno.json", import.meta.url)),
  );
  await using run = new Launcher(["--version"]);
  const status = await run.exited();
  assert.equal(status.code, 0, run.stderr);
  assert.deepEqual(run.stdout.filter((l) => l.trim()), [version]);
});
