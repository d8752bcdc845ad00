/**
 * The launcher's config read once: every default has one source
 * (`SEMIOSERVE_DEFAULTS`), and the `@default` tags an embedder reads in
 * `SemioserveOptions` say the same values.
 */
import assert from "node:assert/strict";
import {
  readConfig,
  SEMIOSERVE_DEFAULTS,
  UsageError,
} from "../../src/serve/config.ts";
import { NUCLEUS_HOST, NUCLEUS_PORT } from "../../src/common.ts";

/** The environment without a root directory: what is resolved from options alone. */
const ENV = { ...Deno.env.toObject(), MY_LOCAL: undefined };

const SOURCE = await Deno.readTextFile(
  new URL("../../src/serve/config.ts", import.meta.url),
);

/** Each field of `SemioserveOptions` and the text of its `@default` tag. */
function defaultTags(): Map<string, string> {
  const start = SOURCE.indexOf("export interface SemioserveOptions {");
  const body = SOURCE.slice(start, SOURCE.indexOf("\n}\n", start));
  const tags = new Map<string, string>();
  for (
    const [, doc, field] of body.matchAll(
      /\/\*\*((?:(?!\*\/)[\s\S])*)\*\/\s*(\w+)\??:/g,
    )
  ) {
    const tag = /@default \{([^}]*)\}/.exec(doc!)?.[1];
    if (tag !== undefined) tags.set(field!, tag);
  }
  return tags;
}

Deno.test("every @default tag of SemioserveOptions says the value readConfig gives", () => {
  const tags = defaultTags();
  assert.ok(tags.size >= 18, `only ${tags.size} @default tags found`);
  const resolved: Record<string, unknown> = {
    ...readConfig({ models: ["a"] }, ENV),
  };
  const fromEnvironment: Record<string, unknown> = {
    NUCLEUS_HOST,
    NUCLEUS_PORT,
  };
  for (const [field, tag] of tags) {
    let value: unknown;
    try {
      value = JSON.parse(tag);
    } catch {
      if (tag in fromEnvironment) {
        assert.equal(resolved[field], fromEnvironment[tag], field);
      } else {
        // Prose ("the catalogue shipped with the package"): resolved where it is checked.
        assert.equal(resolved[field], undefined, field);
        assert.ok(!(field in SEMIOSERVE_DEFAULTS), field);
      }
      continue;
    }
    assert.deepEqual(resolved[field], value, `@default of ${field}`);
  }
  for (const field of Object.keys(SEMIOSERVE_DEFAULTS)) {
    assert.ok(tags.has(field), `${field} has a default but no @default tag`);
  }
});

Deno.test("readConfig: what is given wins, an undefined field takes the default", () => {
  const resolved = readConfig({
    models: ["alpha"],
    graceMs: 0,
    port: 6000,
    handleSignals: false,
    // A JavaScript caller may pass undefined explicitly.
    healthIntervalMs: undefined as unknown as number,
  }, ENV);
  assert.equal(resolved.graceMs, 0);
  assert.equal(resolved.port, 6000);
  assert.equal(resolved.handleSignals, false);
  assert.equal(resolved.healthIntervalMs, SEMIOSERVE_DEFAULTS.healthIntervalMs);
  assert.equal(resolved.host, NUCLEUS_HOST);
  assert.deepEqual(resolved.models, ["alpha"]);
});

Deno.test("readConfig: a flag wins over the variable it mirrors, which is then not read", () => {
  const env = { NUCLEUS_PORT: "not a port", MY_LOCAL: "/nonexistent" };
  const config = readConfig(
    { models: ["a"], port: 6000, directory: "/d" },
    env,
  );
  assert.equal(config.port, 6000);
  assert.equal(config.directory, "/d");
  assert.throws(
    () => readConfig({ models: ["a"] }, { NUCLEUS_PORT: "x" }),
    /Cannot use NUCLEUS_PORT="x"/,
  );
});

Deno.test("readConfig: no model, or engine ports past 65535, is a usage error checked once", () => {
  assert.throws(() => readConfig({ models: [] }, {}), UsageError);
  assert.throws(
    () => readConfig({ models: ["a", "b"], port: 65534 }, {}),
    /^UsageError: Cannot use --port 65534 for 2 models: engine ports would pass 65535$/,
  );
  assert.throws(
    () => readConfig({ models: ["a", "b"] }, { NUCLEUS_PORT: "65534" }),
    /Cannot use port 65534 for 2 models/,
  );
});

Deno.test("readConfig: the engines' base environment is the launcher's less its private variables", () => {
  const config = readConfig({ models: ["a"] }, {
    PATH: "/bin",
    IDP_SECRET: "s",
    IDP_ISSUER: "i",
    HF_HOME: "/hf",
  });
  assert.deepEqual(config.engineEnv, { PATH: "/bin", HF_HOME: "/hf" });
  assert.equal(config.idpSecret, "s");
  assert.ok(Object.isFrozen(config));
});
