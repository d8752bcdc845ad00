/**
 * catalogue/catalogue.schema.json against the card reader: a real JSON Schema
 * validator (ajv, 2020-12, strict) runs over the shipped catalogue and every
 * catalogue text the reader's tests use, and both must give the same verdict,
 * except for the rules a schema cannot express, listed here by name.
 */
import assert from "node:assert/strict";
import { Ajv2020 } from "ajv/dist/2020.js";
import { parse } from "yaml";
import {
  CatalogueError,
  Modality,
  Registry,
  Verb,
} from "../../src/catalogue.ts";
import { DEFAULT_CATALOGUE } from "../../src/catalogue/registry.ts";
import {
  ENGINE_NAMES,
  RESTART_POLICIES,
} from "../../src/catalogue/model_card.ts";
import {
  BAD,
  GOOD,
  MALFORMED_REFERENCES,
  referenceCard,
} from "../fixtures/catalogue_texts.ts";

const SCHEMA_URL = new URL(
  "../../catalogue/catalogue.schema.json",
  import.meta.url,
);
const FIXTURES = new URL("../fixtures/catalogues/", import.meta.url);
const schema = JSON.parse(await Deno.readTextFile(SCHEMA_URL));

/**
 * Rules of the reader that a JSON Schema cannot express, by the fixtures that
 * break them: the schema sees a parsed document (or none), not YAML text.
 */
const NOT_EXPRESSIBLE: Record<string, string> = {
  "BAD.syntaxNestedMapping": "YAML syntax (no document to validate)",
  "BAD.syntaxUnclosedList": "YAML syntax (no document to validate)",
  "BAD.syntaxTab": "YAML syntax (no document to validate)",
  "BAD.duplicateField": "duplicate keys (a parsed mapping holds each key once)",
  "BAD.duplicateCard": "duplicate keys (a parsed mapping holds each key once)",
  "BAD.duplicateArg": "duplicate keys (a parsed mapping holds each key once)",
  "BAD.unknownAnchor": "aliases to unknown anchors (no document to validate)",
  "BAD.nameCaseClash":
    "card names that differ only in case (a schema compares names one at a time)",
  "BAD.drainTimeoutHex": "a number as written (the schema sees 16, not 0x10)",
  "BAD.stallTimeoutUnderMs":
    "a non-zero duration that rounds to 0 ms (0 means off)",
};

function compile() {
  // Strict, less ajv's own style rules that standard idioms break: union
  // types ("a number or a boolean"), `required` in an anyOf branch ("hub or
  // local"), a 1-tuple `prefixItems` then `items` (program, then arguments).
  const ajv = new Ajv2020({
    strict: true,
    allowUnionTypes: true,
    strictRequired: false,
    strictTuples: false,
    allErrors: true,
  });
  return ajv.compile(schema);
}

/** Every catalogue text the reader is tested with, by name. */
async function fixtures(): Promise<Map<string, string>> {
  const all = new Map<string, string>();
  for (const [name, text] of Object.entries(GOOD)) {
    all.set(`GOOD.${name}`, text);
  }
  for (const [name, text] of Object.entries(BAD)) all.set(`BAD.${name}`, text);
  for (const value of MALFORMED_REFERENCES) {
    all.set(`reference ${value}`, referenceCard(value));
  }
  for await (const entry of Deno.readDir(FIXTURES)) {
    all.set(
      `file ${entry.name}`,
      await Deno.readTextFile(new URL(entry.name, FIXTURES)),
    );
  }
  all.set(
    "shipped catalogue",
    await (await fetch(DEFAULT_CATALOGUE)).text(),
  );
  return all;
}

function readerAccepts(text: string): boolean {
  try {
    Registry.parse(text, "fixture.yaml");
    return true;
  } catch (error) {
    if (error instanceof CatalogueError) return false;
    throw error;
  }
}

/** The schema's verdict, or `undefined` when YAML gives no document to validate. */
function schemaAccepts(
  validate: ReturnType<typeof compile>,
  text: string,
): boolean | undefined {
  let data: unknown;
  try {
    data = parse(text);
  } catch {
    return undefined;
  }
  return validate(data) === true;
}

Deno.test("the schema is JSON Schema 2020-12 that ajv compiles in strict mode", () => {
  assert.equal(
    schema.$schema,
    "https://json-schema.org/draft/2020-12/schema",
  );
  assert.equal(typeof compile(), "function");
});

Deno.test("the shipped catalogue names the schema for editors and passes it", async () => {
  const text = await (await fetch(DEFAULT_CATALOGUE)).text();
  assert.equal(
    text.split("\n")[0],
    "# yaml-language-server: $schema=./catalogue.schema.json",
  );
  const validate = compile();
  assert.equal(validate(parse(text)), true, JSON.stringify(validate.errors));
});

Deno.test("the schema's card fields and enums are the reader's", () => {
  const card = schema.$defs.card;
  // The reader lists its fields when it meets an unknown one.
  let listed: string | undefined;
  try {
    Registry.parse(BAD.unknownField, "x.yaml");
  } catch (error) {
    listed = (error as Error).message.match(/expected one of ([^;(]+?)(;|$)/)
      ?.[1];
  }
  assert.ok(listed, "the reader names its fields");
  assert.deepEqual(
    Object.keys(card.properties).sort(),
    listed.split(", ").map((field) => field.trim()).sort(),
  );
  assert.deepEqual(card.properties.verb.enum, Object.values(Verb));
  assert.deepEqual(schema.$defs.modality.enum, Object.values(Modality));
  assert.deepEqual(card.properties.engine.enum, [...ENGINE_NAMES]);
  assert.deepEqual(card.properties.restart.enum, [...RESTART_POLICIES]);
  assert.equal(card.additionalProperties, false);
  assert.equal(schema.additionalProperties, false);
  for (const [field, spec] of Object.entries(card.properties)) {
    assert.ok(
      typeof (spec as { description?: unknown }).description === "string",
      `field ${field} has no description`,
    );
  }
});

Deno.test("the schema and the card reader agree on every fixture, except the rules a schema cannot express", async () => {
  const validate = compile();
  const disagree: string[] = [];
  const exceptions: string[] = [];
  let compared = 0;
  const all = await fixtures();
  for (const [name, text] of all) {
    const reader = readerAccepts(text);
    const schemaVerdict = schemaAccepts(validate, text);
    if (name in NOT_EXPRESSIBLE) {
      // Listed: the reader refuses and the schema cannot (no document, or accepts).
      assert.equal(reader, false, `${name}: the reader accepts it`);
      assert.notEqual(schemaVerdict, false, `${name}: the schema refuses it`);
      exceptions.push(name);
      continue;
    }
    compared++;
    if (schemaVerdict !== reader) {
      disagree.push(
        `${name}: reader ${reader ? "accepts" : "refuses"}, schema ${
          schemaVerdict === undefined
            ? "has no document"
            : schemaVerdict
            ? "accepts"
            : "refuses"
        } ${JSON.stringify(validate.errors ?? [])}`,
      );
    }
  }
  assert.deepEqual(disagree, []);
  assert.deepEqual(exceptions.sort(), Object.keys(NOT_EXPRESSIBLE).sort());
  assert.equal(compared + exceptions.length, all.size);
  assert.ok(compared >= 40, `only ${compared} fixtures compared`);
});

Deno.test("the schema refuses each gpus form the reader refuses, and takes 0, whole numbers and shares", () => {
  const validate = compile();
  const gpus = (value: unknown) =>
    validate({ models: { m: { verb: "chat", hub: "org/m", gpus: value } } });
  for (const ok of [0, 1, 2, 8, 0.3, 0.05]) {
    assert.equal(gpus(ok), true, `${ok}`);
  }
  for (const bad of [1.5, -1, 1.0001, "two", null, true]) {
    assert.equal(gpus(bad), false, `${bad}`);
  }
});
