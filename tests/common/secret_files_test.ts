/**
 * `IDP_SECRET_FILE` and `LOCAL_ENGINE_API_KEY_FILE` through the real launcher
 * CLI in a subprocess: the secret is read from the file, never reaches a log
 * line nor an engine's environment, and every bad setting refuses to start in
 * one line naming the file.
 */
import assert from "node:assert/strict";
import { SignJWT } from "jose";
import {
  fakeBin,
  freePorts,
  Launcher,
  listDir,
  listening,
  makeRoot,
  pathWith,
  readRecord,
  siteArgs,
  waitFor,
} from "../support/helpers.ts";
import { secretFromEnv } from "../../src/common/secret_file.ts";

const SECRET =
  "a-secret-from-a-file-that-is-at-least-sixty-four-bytes-long-0123456789";
const API_KEY = "engine-key-from-a-file-4f9a";
const ISSUER = "https://idp.example";

function token(secret: string): Promise<string> {
  return new SignJWT({ aud: "nexus", iss: ISSUER })
    .setProtectedHeader({ alg: "HS512" })
    .setIssuedAt()
    .setExpirationTime("5m")
    .sign(new TextEncoder().encode(secret));
}

interface Site extends AsyncDisposable {
  dir: string;
  port: number;
  records: string;
  root: string;
  /** Writes a file in the site's directory, returns its path. */
  file(name: string, text: string, mode?: number): Promise<string>;
  start(env: Record<string, string>): Launcher;
}

async function site(): Promise<Site> {
  const root = await makeRoot();
  const bin = await fakeBin();
  const records = await Deno.makeTempDir();
  const dir = await Deno.makeTempDir({ prefix: "serve-secrets-" });
  const port = freePorts(1);
  const launchers: Launcher[] = [];
  return {
    dir,
    port,
    records,
    root,
    async file(name, text, mode = 0o600) {
      const path = `${dir}/${name}`;
      await Deno.writeTextFile(path, text);
      await Deno.chmod(path, mode);
      return path;
    },
    start(env) {
      const launcher = new Launcher(["alpha", ...siteArgs(port, root)], {
        PATH: pathWith(bin),
        FAKE_ENGINE_RECORD_DIR: records,
        NUCLEUS_MODE: "production",
        IDP_ISSUER: ISSUER,
        // The test runner's own values must not leak in.
        IDP_SECRET: "",
        IDP_SECRET_FILE: "",
        LOCAL_ENGINE_API_KEY: "",
        LOCAL_ENGINE_API_KEY_FILE: "",
        ...env,
      });
      launchers.push(launcher);
      return launcher;
    },
    async [Symbol.asyncDispose]() {
      for (const l of launchers) await l.stop();
      for (const path of [root, bin, records, dir]) {
        await Deno.remove(path, { recursive: true });
      }
    },
  };
}

/** Asserts the launcher exits 1 with one line matching every pattern. */
async function refusesToStart(
  s: Site,
  launcher: Launcher,
  ...patterns: RegExp[]
): Promise<string> {
  assert.equal((await launcher.exited()).code, 1, launcher.stderr);
  const lines = launcher.lines.filter((l) => l.trim());
  assert.equal(lines.length, 1, launcher.stderr);
  const line = lines[0] ?? "";
  assert.match(line, /^\[serve\] error: Cannot /);
  for (const pattern of patterns) assert.match(line, pattern);
  assert.ok(!line.includes(SECRET) && !line.includes(API_KEY), line);
  assert.deepEqual(listDir(s.records), [], "no engine started");
  assert.ok(!(await listening(s.port)));
  return line;
}

Deno.test("secrets from files: the launcher authenticates with IDP_SECRET_FILE and gives the engine LOCAL_ENGINE_API_KEY_FILE's key as --api-key only", async () => {
  await using s = await site();
  const secretFile = await s.file("idp_secret", `${SECRET}\n`);
  const keyFile = await s.file("engine_key", `${API_KEY}\n`);
  const launcher = s.start({
    IDP_SECRET_FILE: secretFile,
    LOCAL_ENGINE_API_KEY_FILE: keyFile,
  });
  await launcher.ready();
  assert.match(launcher.stderr, /mode: production/);
  assert.doesNotMatch(launcher.stderr, /warn/, "mode 600: no warning");

  const url = `http://127.0.0.1:${s.port}/models`;
  const ok = await fetch(url, {
    headers: { authorization: `Bearer ${await token(SECRET)}` },
  });
  await ok.body?.cancel();
  assert.equal(ok.status, 200, "the secret is the file less its newline");
  const withNewline = await fetch(url, {
    headers: { authorization: `Bearer ${await token(`${SECRET}\n`)}` },
  });
  await withNewline.body?.cancel();
  assert.equal(withNewline.status, 401, "exactly one newline was removed");

  let record: Awaited<ReturnType<typeof readRecord>>;
  await waitFor(
    async () =>
      (record = await readRecord(s.records, s.port + 1)) !== undefined,
    "the engine's record",
  );
  const argv = record!.argv;
  assert.equal(argv[argv.indexOf("--api-key") + 1], API_KEY);
  // The engine's whole environment, as the kernel shows it.
  const environ = await Deno.readTextFile(`/proc/${record!.pid}/environ`);
  for (const text of [SECRET, API_KEY, "IDP_SECRET_FILE", "_KEY_FILE="]) {
    assert.ok(!environ.includes(text), `engine environment holds ${text}`);
  }
  await launcher.stop();
  const engineLog = await Deno.readTextFile(`${s.root}/logs/alpha.log`);
  for (const text of [launcher.stderr, engineLog]) {
    assert.ok(!text.includes(SECRET) && !text.includes(API_KEY));
  }
});

Deno.test("secrets from files: a file readable by group or others starts with a warning naming it, not its content", async () => {
  await using s = await site();
  const secretFile = await s.file("idp_secret", SECRET, 0o640);
  const launcher = s.start({ IDP_SECRET_FILE: secretFile });
  await launcher.ready();
  const warnings = launcher.lines.filter((l) => l.includes("warn:"));
  assert.equal(warnings.length, 1, launcher.stderr);
  assert.match(
    warnings[0] ?? "",
    new RegExp(
      `IDP_SECRET_FILE=${secretFile} is readable by group or others \\(mode 0640\\)`,
    ),
  );
  assert.ok(!launcher.stderr.includes(SECRET));
});

for (const name of ["IDP_SECRET", "LOCAL_ENGINE_API_KEY"]) {
  Deno.test(`secrets from files: ${name} and ${name}_FILE both set refuse to start in one line`, async () => {
    await using s = await site();
    const file = await s.file("secret", SECRET);
    const launcher = s.start({
      IDP_SECRET: SECRET,
      [name]: SECRET,
      [`${name}_FILE`]: file,
    });
    await refusesToStart(
      s,
      launcher,
      new RegExp(`both ${name} and ${name}_FILE are set`),
    );
  });
}

Deno.test("secrets from files: a missing, unreadable or empty file refuses to start, naming the file", async () => {
  await using s = await site();
  const cases: [string, RegExp][] = [
    [`${s.dir}/no-such-file`, /No such file/],
    [s.dir, /directory/i],
    [await s.file("empty", "\n"), /the file is empty/],
  ];
  for (const [path, problem] of cases) {
    const launcher = s.start({ IDP_SECRET_FILE: path });
    const line = await refusesToStart(s, launcher, problem);
    assert.ok(line.includes(`IDP_SECRET_FILE=${path}`), line);
  }
});

Deno.test("secretFromEnv: removes one trailing newline, CRLF included, and no more", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const cases: [string, string][] = [
      ["key\n", "key"],
      ["key\r\n", "key"],
      ["key\n\n", "key\n"],
      ["key", "key"],
      [" key \n", " key "],
    ];
    for (const [content, expected] of cases) {
      const path = `${dir}/secret`;
      await Deno.writeTextFile(path, content, { mode: 0o600 });
      await Deno.chmod(path, 0o600);
      const env = { X_FILE: path } as Record<string, string>;
      assert.equal(secretFromEnv("X", (n) => env[n]), expected);
    }
    assert.equal(secretFromEnv("X", () => undefined), "");
    const env = { X: "direct", X_FILE: "" } as Record<string, string>;
    assert.equal(secretFromEnv("X", (n) => env[n]), "direct");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
