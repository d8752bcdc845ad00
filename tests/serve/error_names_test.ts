/**
 * The names docs/cli.md gives the start-up errors are the classes an embedding
 * program catches: a bad root directory is node's `AssertionError`, an
 * unknown model the catalogue's `KeyError`. The CLI prints their message
 * alone (`[serve] error: Cannot use root directory …`), like every other
 * start-up error, so the message itself carries no class name.
 */
import assert from "node:assert/strict";
import { AssertionError } from "node:assert";
import { Semioserve } from "../../mod.ts";
import { KeyError } from "../../src/catalogue.ts";
import { makeRoot, STAND_IN_CATALOGUE } from "../support/helpers.ts";

async function prepareFails(
  models: string[],
  subdirs?: string[],
): Promise<unknown> {
  await Semioserve.reset();
  const root = await makeRoot(subdirs);
  try {
    const serve = new Semioserve({
      models,
      directory: root,
      catalogue: STAND_IN_CATALOGUE,
      handleSignals: false,
    });
    return await serve.prepare().then(
      () => assert.fail("prepare() resolved"),
      (error: unknown) => error,
    );
  } finally {
    await Semioserve.reset();
    await Deno.remove(root, { recursive: true });
  }
}

Deno.test("a root directory missing subdirectories rejects with node's AssertionError, the message naming no class", async () => {
  const error = await prepareFails(["alpha"], ["models"]);
  assert.ok(error instanceof AssertionError);
  assert.equal(error.name, "AssertionError");
  assert.match(error.message, /^Cannot use root directory .*: missing logs/);
});

Deno.test("an unknown model rejects with the catalogue's KeyError, the message naming no class", async () => {
  const error = await prepareFails(["alpah"]);
  assert.ok(error instanceof KeyError);
  assert.equal(error.name, "KeyError");
  assert.equal(error.model, "alpah");
  assert.match(error.message, /^Unknown model 'alpah': .*did you mean alpha/);
});
