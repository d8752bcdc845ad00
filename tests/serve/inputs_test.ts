/**
 * Inputs that failed the operator (issue 47, items 6, 7 and 8): a duration a
 * timer cannot hold, an empty NUCLEUS_MODE, a bad NUCLEUS_HOST, an engine key
 * the launcher cannot send. Each is one line naming the input and what was
 * expected, nothing started; a reload refuses the same and keeps its engines.
 */
import assert from "node:assert/strict";
import { readConfig, UsageError } from "../../src/serve/config.ts";
import { ConfigError } from "../../src/common.ts";
import {
  getJson,
  launch,
  makeRoot,
  readRecord,
  waitFor,
} from "../support/helpers.ts";
import { catalogueFile, refused } from "../support/refusals.ts";

const TIMER =
  "a decimal number of seconds from 0.001 to 2147483\\.647 \\(a timer holds at most 2\\^31-1 ms, about 24\\.8 days\\)";

/** The stand-in catalogue's llama.cpp card `gguf` finds one .gguf file. */
async function ggufDir(root: string): Promise<void> {
  await Deno.mkdir(`${root}/models/gguf-dir`);
  await Deno.writeTextFile(`${root}/models/gguf-dir/m.gguf`, "GGUF");
}

async function ggufRoot(): Promise<string> {
  const root = await makeRoot();
  await ggufDir(root);
  return root;
}

// Item 6: durations hold.

Deno.test("--failed-retry 2592000 (30 days, past a timer's 24.8) is refused in one line, exit 2, nothing started", async () => {
  await refused(
    ["alpha"],
    new RegExp(
      `^\\[serve\\] error: Cannot use --failed-retry=2592000: expected 0 or ${TIMER} \\(see --help\\)$`,
    ),
    { extra: ["--failed-retry", "2592000"], code: 2 },
  );
});

Deno.test("a seconds flag in hex, or one that rounds to 0 ms, is refused as the count flags refuse hex", async () => {
  await refused(
    ["alpha"],
    new RegExp(
      `^\\[serve\\] error: Cannot use --drain-timeout=0x10: expected 0 or ${TIMER} \\(see --help\\)$`,
    ),
    { extra: ["--drain-timeout=0x10"], code: 2 },
  );
  await refused(
    ["alpha"],
    new RegExp(
      `^\\[serve\\] error: Cannot use --stall-timeout=0\\.0004: expected 0 or ${TIMER} \\(see --help\\)$`,
    ),
    { extra: ["--stall-timeout=0.0004"], code: 2 },
  );
});

Deno.test("a card's failed_retry past what a timer holds is refused at load, naming the card, field and line", async () => {
  await using file = await catalogueFile(
    "models:\n  m: { verb: chat, hub: org/m, failed_retry: 2592000 }\n",
  );
  await refused(
    ["m"],
    new RegExp(
      `^\\[serve\\] error: Cannot load catalogue \\S+: card 'm', field 'failed_retry' \\(line 2\\): expected 0 \\(never tried again\\) or ${TIMER}, got 2592000$`,
    ),
    { catalogue: file.path },
  );
});

Deno.test("an embedder's milliseconds past a timer's limit are refused by readConfig, naming the option", () => {
  assert.throws(
    () => readConfig({ models: ["a"], failedRetryMs: 2_592_000_000 }, {}),
    (error) => {
      assert.ok(error instanceof UsageError);
      assert.equal(
        error.message,
        "Cannot use failedRetryMs=2592000000: expected milliseconds from 0 to 2147483647 (a timer holds at most 2^31-1 ms, about 24.8 days)",
      );
      return true;
    },
  );
  assert.throws(
    () => readConfig({ models: ["a"], graceMs: -1 }, {}),
    /Cannot use graceMs=-1: expected milliseconds from 0/,
  );
  assert.equal(
    readConfig({ models: ["a"], drainTimeoutMs: 2 ** 31 - 1 }, {})
      .drainTimeoutMs,
    2 ** 31 - 1,
  );
});

// Item 7: modes fail closed.

Deno.test("NUCLEUS_MODE set but empty means production; unset means dev", () => {
  assert.equal(
    readConfig({ models: ["a"] }, { NUCLEUS_MODE: "" }).devMode,
    false,
  );
  assert.equal(readConfig({ models: ["a"] }, {}).devMode, true);
  assert.equal(
    readConfig({ models: ["a"] }, { NUCLEUS_MODE: "dev" }).devMode,
    true,
  );
});

Deno.test("NUCLEUS_MODE set but empty: every path wants a token", async () => {
  await using s = await launch(["alpha"], {
    env: {
      NUCLEUS_MODE: "",
      IDP_SECRET: "a-production-secret-".repeat(4),
      IDP_ISSUER: "https://idp.example",
    },
  });
  await s.launcher.ready();
  assert.match(s.launcher.stderr, /mode: production/);
  for (const path of ["/health", "/models"]) {
    const { status } = await getJson(`http://127.0.0.1:${s.port}${path}`);
    assert.equal(status, 401, path);
  }
});

Deno.test("NUCLEUS_MODE set but empty without the production secrets: the refusal says the variable is empty", async () => {
  await refused(
    ["alpha"],
    /^\[serve\] error: Cannot start in production mode: IDP_SECRET and IDP_ISSUER must be set and non-empty \(or run with --dev_mode\); production mode because NUCLEUS_MODE="" \(set but empty\) \(only a value starting with lowercase "dev" means development\)$/,
    { env: { NUCLEUS_MODE: "", IDP_SECRET: "", IDP_ISSUER: "" } },
  );
});

Deno.test("NUCLEUS_MODE of whitespace without the production secrets: the refusal quotes it", async () => {
  await refused(
    ["alpha"],
    /^\[serve\] error: Cannot start in production mode: .*; production mode because NUCLEUS_MODE=" {2}" \(only a value starting with lowercase "dev" means development\)$/,
    { env: { NUCLEUS_MODE: "  ", IDP_SECRET: "", IDP_ISSUER: "" } },
  );
});

Deno.test("a NUCLEUS_HOST (or --host) that does not resolve is reported under its own name, not as a port", async () => {
  const line = await refused(
    ["alpha"],
    /^\[serve\] error: Cannot use NUCLEUS_HOST=nosuch\.invalid: .+ \(expected a name or address of this machine to listen on\)$/,
    { env: { NUCLEUS_HOST: "nosuch.invalid" }, withoutHost: true },
  );
  assert.doesNotMatch(line, /port \d+/);
  await refused(
    ["alpha"],
    /^\[serve\] error: Cannot use --host=nosuch\.invalid: .+ \(expected a name or address of this machine to listen on\)$/,
    {
      env: { NUCLEUS_HOST: "127.0.0.1" },
      extra: ["--host", "nosuch.invalid"],
      withoutHost: true,
    },
  );
  assert.throws(
    () => Deno.listen({ hostname: "nosuch.invalid", port: 0 }).close(),
    "the name must not resolve here for this test to mean anything",
  );
});

// Item 8: engine keys the launcher cannot send.

Deno.test("an engine key the launcher cannot send in a header is refused by name, never quoted", () => {
  const cases: [string, string][] = [
    ["key ", "starts or ends with a space"],
    [" key", "starts or ends with a space"],
    ["ke\ry", "holds a carriage return"],
    ["ke\ty", "holds a tab"],
    ["clé", "holds a character outside printable ASCII"],
    ["κλειδί", "holds a character outside printable ASCII"],
  ];
  for (const [key, says] of cases) {
    assert.throws(
      () => readConfig({ models: ["a"] }, { LOCAL_ENGINE_API_KEY: key }),
      (error) => {
        assert.ok(error instanceof ConfigError);
        assert.equal(
          error.message,
          `Cannot use LOCAL_ENGINE_API_KEY: the key ${says} (expected printable ASCII without surrounding spaces: the launcher sends it to each engine in an Authorization header)`,
        );
        return true;
      },
      JSON.stringify(key),
    );
  }
  const printable = Array.from(
    { length: 0x7e - 0x21 + 1 },
    (_, i) => String.fromCharCode(0x21 + i),
  ).join("") + " inner space";
  assert.equal(
    readConfig({ models: ["a"] }, { LOCAL_ENGINE_API_KEY: printable })
      .engineKey,
    printable,
  );
});

Deno.test("a key file whose key ends in a carriage return is refused naming the file", async () => {
  const file = await Deno.makeTempFile();
  try {
    // CRLF is one newline and goes; the lone CR before it stays in the key.
    await Deno.writeTextFile(file, "secret-key\r\r\n", { mode: 0o600 });
    await refused(
      ["alpha"],
      new RegExp(
        `^\\[serve\\] error: Cannot use LOCAL_ENGINE_API_KEY_FILE=${file}: the key holds a carriage return \\(expected printable ASCII`,
      ),
      { env: { LOCAL_ENGINE_API_KEY_FILE: file } },
    );
  } finally {
    await Deno.remove(file);
  }
});

Deno.test("a key with a comma is refused at plan time for a llama.cpp card, in one line, never quoted", async () => {
  const line = await refused(
    ["alpha", "gguf"],
    /^\[serve\] error: Cannot use LOCAL_ENGINE_API_KEY for gguf: the key holds ',' \(expected a key without ',', not opening with '"': llama\.cpp reads --api-key as keys separated by ',', each may be quoted\)$/,
    {
      env: { LOCAL_ENGINE_API_KEY: "first-half,second-half" },
      root: ggufDir,
    },
  );
  assert.doesNotMatch(line, /first-half/);
});

const LLAMA_AND_VLLM =
  "models:\n  alpha: { verb: chat, hub: org/alpha }\n  gguf: { verb: chat, engine: llama.cpp, local: gguf-dir }\n";

Deno.test("reload: a key with a comma, or surrounding spaces, is refused and the engines keep running", async () => {
  const secrets = await Deno.makeTempDir({ prefix: "serve-secrets-" });
  const keyFile = `${secrets}/key`;
  await Deno.writeTextFile(keyFile, "key-one\n", { mode: 0o600 });
  try {
    await using cat = await catalogueFile(LLAMA_AND_VLLM);
    await using s = await launch(["alpha", "gguf"], {
      catalogue: cat.path,
      env: { LOCAL_ENGINE_API_KEY_FILE: keyFile },
      root: await ggufRoot(),
    });
    await s.launcher.ready();
    const pids: number[] = [];
    for (const n of [1, 2]) {
      await waitFor(async () => {
        const record = await readRecord(s.records, s.port + n);
        if (record) pids[n] = record.pid;
        return record !== undefined;
      }, `engine ${n}`);
    }
    const reloads = () =>
      s.launcher.lines.filter((l) => /reload( refused)?: /.test(l));
    const cases: [string, RegExp][] = [
      [
        "key,two\n",
        new RegExp(
          `reload refused: Cannot use LOCAL_ENGINE_API_KEY_FILE=${keyFile} for gguf: the key holds ','`,
        ),
      ],
      [
        "key-two \n",
        new RegExp(
          `reload refused: Cannot use LOCAL_ENGINE_API_KEY_FILE=${keyFile}: the key starts or ends with a space`,
        ),
      ],
    ];
    for (const [text, says] of cases) {
      const before = reloads().length;
      await Deno.writeTextFile(keyFile, text);
      s.launcher.child.kill("SIGHUP");
      await waitFor(() => reloads().length > before, "the reload's line");
      assert.match(reloads()[before]!, says);
    }
    for (const n of [1, 2]) {
      assert.equal((await readRecord(s.records, s.port + n))?.pid, pids[n]);
    }
    assert.ok(!s.launcher.stderr.includes("key,two"), "the key is not logged");
  } finally {
    await Deno.remove(secrets, { recursive: true });
  }
});
