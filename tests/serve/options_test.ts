/**
 * The launcher's options resolved once: every default has one source
 * (`SEMIOSERVE_DEFAULTS`), and the `@default` tags an embedder reads in
 * `SemioserveOptions` say the same values.
 */
import assert from "node:assert/strict";
import {
  resolveOptions,
  SEMIOSERVE_DEFAULTS,
} from "../../src/serve/options.ts";
import { NUCLEUS_HOST, NUCLEUS_PORT } from "../../src/common.ts";

const SOURCE = await Deno.readTextFile(
  new URL("../../src/serve/options.ts", import.meta.url),
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

Deno.test("every @default tag of SemioserveOptions says the value resolveOptions gives", () => {
  const tags = defaultTags();
  assert.ok(tags.size >= 18, `only ${tags.size} @default tags found`);
  const resolved: Record<string, unknown> = resolveOptions({ models: [] });
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

Deno.test("resolveOptions: what is given wins, an undefined field takes the default", () => {
  const resolved = resolveOptions({
    models: ["alpha"],
    graceMs: 0,
    port: 6000,
    handleSignals: false,
    // A JavaScript caller may pass undefined explicitly.
    healthIntervalMs: undefined as unknown as number,
  });
  assert.equal(resolved.graceMs, 0);
  assert.equal(resolved.port, 6000);
  assert.equal(resolved.handleSignals, false);
  assert.equal(resolved.healthIntervalMs, SEMIOSERVE_DEFAULTS.healthIntervalMs);
  assert.equal(resolved.host, NUCLEUS_HOST);
  assert.deepEqual(resolved.models, ["alpha"]);
});
