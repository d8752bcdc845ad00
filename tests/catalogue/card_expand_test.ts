/**
 * `${NAME}` in cards: what is expanded, what is left alone, and the one-line
 * error naming file, card, field, line and variable when a variable is unset.
 */
import assert from "node:assert/strict";
import { CatalogueError, Registry } from "../../src/catalogue.ts";
import { UnsetVariableError } from "../../src/catalogue/catalogue_error.ts";
import {
  GOOD,
  MALFORMED_REFERENCES,
  referenceCard,
} from "../fixtures/catalogue_texts.ts";

const CARDS = GOOD.expansion;

const ENV = {
  BIN_DIR: "/opt/engine/bin",
  PEER: "10.0.0.1",
  PEER_PORT: "20000",
  NODE_RANK: "1",
  HEAD: "10.0.0.2",
};

/** Expands `name` with `env` and returns the UnsetVariableError it must throw. */
function unset(
  registry: Registry,
  name: string,
  env: Record<string, string>,
): UnsetVariableError {
  try {
    registry.expand(registry.get(name), env);
  } catch (error) {
    if (error instanceof UnsetVariableError) return error;
    throw error;
  }
  assert.fail("expected an UnsetVariableError");
}

Deno.test("${NAME} is replaced in executable, command, args values and env values", () => {
  const registry = Registry.parse(CARDS, "cards.yaml");
  const card = registry.expand(registry.get("node"), ENV);
  assert.equal(card.executable, "/opt/engine/bin/engine");
  assert.deepEqual(card.command, [
    "/opt/engine/bin/engine",
    "--peer=10.0.0.1:20000",
  ]);
  assert.deepEqual(card.args, [
    "--node-rank",
    "1",
    "--${NOT_A_VALUE}",
    "x",
    "--cost",
    "$5 and $$5",
    "--template",
    "${literal}",
    "--tags",
    "a-1",
    "--tags",
    "b",
  ]);
  assert.deepEqual(card.env, { RAY_ADDRESS: "10.0.0.2:6379" });
  assert.ok(Object.isFrozen(card) && Object.isFrozen(card.args));
});

Deno.test("the registry keeps the card as written; expansion makes a new card", () => {
  const registry = Registry.parse(CARDS, "cards.yaml");
  registry.expand(registry.get("node"), ENV);
  assert.deepEqual(registry.get("node").args.slice(0, 2), [
    "--node-rank",
    "${NODE_RANK}",
  ]);
  assert.equal(registry.get("node").env.RAY_ADDRESS, "${HEAD}:6379");
});

Deno.test("a card with nothing to expand is returned as it is", () => {
  const registry = Registry.parse(CARDS, "cards.yaml");
  const plain = registry.get("plain");
  assert.equal(registry.expand(plain, {}), plain);
});

Deno.test("a set but empty variable expands to the empty string", () => {
  const registry = Registry.parse(CARDS, "cards.yaml");
  const card = registry.expand(registry.get("node"), { ...ENV, PEER: "" });
  assert.equal(card.command?.[1], "--peer=:20000");
});

Deno.test("an unset variable names the file, card, field, line and variable in one line", () => {
  const registry = Registry.parse(CARDS, "cards.yaml");
  const cases: [string, string, number][] = [
    ["BIN_DIR", "executable", 6],
    ["PEER_PORT", "command[1]", 9],
    ["NODE_RANK", "args.node-rank", 11],
    ["HEAD", "env.RAY_ADDRESS", 17],
  ];
  for (const [variable, field, line] of cases) {
    const { [variable as keyof typeof ENV]: _, ...env } = ENV;
    const error = unset(registry, "node", env);
    assert.equal(error.name, "UnsetVariableError");
    assert.equal(error.file, "cards.yaml");
    assert.equal(error.card, "node");
    assert.equal(error.field, field);
    assert.equal(error.line, line);
    assert.equal(error.variable, variable);
    assert.equal(
      error.message,
      `Cannot expand catalogue cards.yaml: card 'node', field '${field}' (line ${line}): \${${variable}} is not set (expected ${variable} in the launcher's environment; write $\${ for a literal \${)`,
    );
  }
});

Deno.test("a list item of a repeated flag is named with its index", () => {
  const only = Registry.parse(
    GOOD.repeatedFlagReference,
    "tags.yaml",
  );
  const error = unset(only, "n", {});
  assert.equal(error.field, "args.tags[1]");
  assert.equal(error.line, 6);
});

Deno.test("only requested cards are expanded: another card may name unset variables", () => {
  const registry = Registry.parse(CARDS, "cards.yaml");
  assert.doesNotThrow(() => registry.expand(registry.get("node"), ENV));
  const error = unset(registry, "other", ENV);
  assert.equal(error.variable, "NEVER_SET");
  assert.equal(error.line, 21);
});

Deno.test("a malformed reference is a CatalogueError at load time, with its line", () => {
  for (
    const value of MALFORMED_REFERENCES
  ) {
    const field = "args.node-rank";
    assert.throws(
      () =>
        Registry.parse(
          referenceCard(value),
          "bad.yaml",
        ),
      (error: unknown) => {
        assert.ok(error instanceof CatalogueError);
        assert.equal(error.card, "m");
        assert.equal(error.field, field);
        assert.equal(error.line, 5);
        assert.match(error.message, /bad reference '\$\{/);
        assert.match(error.message, /expected \$\{NAME\}/);
        return true;
      },
    );
  }
});

Deno.test("$${ is a literal ${ and is never expanded, even when the name is set", () => {
  const registry = Registry.parse(GOOD.literalDollar);
  const card = registry.expand(registry.get("m"), { HOME: "/home/x" });
  assert.equal(card.env.SHELL_TEXT, "echo ${HOME} /home/x");
});

Deno.test("an expanded card cannot be expanded again", () => {
  const registry = Registry.parse(CARDS, "cards.yaml");
  const card = registry.expand(registry.get("node"), ENV);
  assert.throws(
    () => registry.expand(card, ENV),
    (error: unknown) =>
      error instanceof TypeError &&
      /Cannot expand card 'node': not the card this registry holds/.test(
        error.message,
      ),
  );
});
