import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import {
  CatalogueError,
  KeyError,
  Modality,
  type ModelCard,
  Registry,
  Verb,
} from "../../src/catalogue.ts";
import { DEFAULT_CATALOGUE } from "../../src/catalogue/registry.ts";
import { configureLogging } from "../../src/common/log.ts";
import { BAD, GOOD, yaml } from "../fixtures/catalogue_texts.ts";

const FIXTURES = new URL("../fixtures/catalogues/", import.meta.url);
const SHIPPED_PATH = fileURLToPath(DEFAULT_CATALOGUE);
const warnings: string[] = [];
configureLogging({
  level: "warn",
  sink: (level, message) => {
    if (level === "warn") warnings.push(message);
  },
});

/** Parses `text` and returns the CatalogueError it must throw. */
function catalogueError(text: string, file = "bad.yaml"): CatalogueError {
  try {
    Registry.parse(text, file);
  } catch (error) {
    if (error instanceof CatalogueError) return error;
    throw error;
  }
  assert.fail("expected a CatalogueError");
}

/** Asserts where an error points, that its one-line message says so, and what it expects. */
function assertProblem(
  error: CatalogueError,
  expected: { card?: string; field?: string; line: number; says: RegExp },
): void {
  assert.equal(error.name, "CatalogueError");
  assert.equal(error.file, "bad.yaml");
  assert.equal(error.card, expected.card);
  assert.equal(error.field, expected.field);
  assert.equal(error.line, expected.line);
  const where = [
    expected.card === undefined ? "" : `card '${expected.card}'`,
    expected.field === undefined ? "" : `field '${expected.field}'`,
  ].filter(Boolean).join(", ");
  assert.ok(
    error.message.startsWith(
      `Cannot load catalogue bad.yaml: ${where} (line ${expected.line}): `,
    ),
    error.message,
  );
  assert.ok(!/[\r\n]/.test(error.message), `not one line: ${error.message}`);
  assert.match(error.message, expected.says);
}

function card(registry: Registry, name: string): ModelCard {
  return registry.get(name);
}

// --- the shipped catalogue --------------------------------------------------

Deno.test("the shipped catalogue loads with llama-3, tiny-llama and every main verb", async () => {
  const registry = await Registry.load();
  assert.ok(registry.size >= 12, `only ${registry.size} cards`);
  assert.ok(registry.has("llama-3"));
  assert.ok(registry.has("tiny-llama"));
  const verbs = new Set([...registry].map((c) => c.verb));
  for (const verb of [Verb.CHAT, Verb.EMBED, Verb.RERANK]) {
    assert.ok(verbs.has(verb), `no ${verb} model`);
  }
  assert.equal(
    registry.get("llama-3").hub,
    "meta-llama/Meta-Llama-3-8B-Instruct",
  );
  assert.equal(registry.get("llama-3").engine, "vllm");
});

Deno.test("names() lists every card sorted ascending", async () => {
  const registry = await Registry.load();
  const names = registry.names();
  assert.equal(names.length, registry.size);
  assert.deepEqual(names, [...names].sort());
  assert.deepEqual(new Set(names), new Set([...registry].map((c) => c.name)));
});

Deno.test("the shipped tiny-llama card serves the local demo model with llama.cpp", async () => {
  const tiny = (await Registry.load()).get("tiny-llama");
  assert.equal(tiny.verb, Verb.CHAT);
  assert.equal(tiny.engine, "llama.cpp");
  assert.equal(tiny.local, "tiny-llama");
  assert.equal(tiny.hub, undefined);
  const ctx = tiny.args.indexOf("--ctx-size");
  assert.equal(tiny.args[ctx + 1], "256");
  assert.match(tiny.description ?? "", /random-weight/i);
});

Deno.test("the shipped catalogue has a vision chat card, a GGUF hub card and an SGLang card", async () => {
  const cards = [...await Registry.load()];
  assert.ok(
    cards.some((c) =>
      c.verb === Verb.CHAT && c.modality.includes(Modality.IMAGE)
    ),
  );
  assert.ok(
    cards.some((c) =>
      c.engine === "llama.cpp" && /^[^/]+\/[^/:]+:\w+$/.test(c.hub ?? "")
    ),
  );
  assert.ok(cards.some((c) => c.engine === "sglang"));
});

Deno.test("cards are frozen", async () => {
  const llama = (await Registry.load()).get("llama-3");
  assert.ok(Object.isFrozen(llama));
  assert.ok(Object.isFrozen(llama.args));
  assert.ok(Object.isFrozen(llama.modality));
  assert.ok(Object.isFrozen(llama.env));
  assert.throws(() => {
    (llama.args as string[]).push("--x");
  }, TypeError);
});

// --- loading -------------------------------------------------------------------

Deno.test("load reads a catalogue from a file: URL", async () => {
  const registry = await Registry.load(new URL("minimal.yaml", FIXTURES));
  assert.deepEqual(registry.names(), ["e5-small"]);
  assert.equal(registry.file, fileURLToPath(new URL("minimal.yaml", FIXTURES)));
});

Deno.test("load reads a catalogue from a path", async () => {
  const path = fileURLToPath(new URL("minimal.yaml", FIXTURES));
  const registry = await Registry.load(path);
  assert.equal(registry.file, path);
  assert.equal(registry.get("e5-small").verb, Verb.EMBED);
});

Deno.test("load by path and by the default URL give the same shipped catalogue", async () => {
  const byUrl = await Registry.load(DEFAULT_CATALOGUE);
  const byPath = await Registry.load(fileURLToPath(DEFAULT_CATALOGUE));
  const byDefault = await Registry.load();
  assert.deepEqual(byPath.names(), byUrl.names());
  assert.deepEqual(byDefault.names(), byUrl.names());
  assert.deepEqual(byPath.get("llama-3"), byUrl.get("llama-3"));
});

Deno.test("load of a missing file throws a CatalogueError naming the file, with the cause", async () => {
  const path = fileURLToPath(new URL("no-such-catalogue.yaml", FIXTURES));
  await assert.rejects(Registry.load(path), (error: unknown) => {
    assert.ok(error instanceof CatalogueError);
    assert.equal(error.file, path);
    assert.ok(error.message.startsWith(`Cannot load catalogue ${path}: `));
    assert.ok(error.cause instanceof Deno.errors.NotFound);
    return true;
  });
  await assert.rejects(
    Registry.load(new URL("no-such-catalogue.yaml", FIXTURES)),
    CatalogueError,
  );
});

Deno.test("load of an invalid file names the file, card, field and line", async () => {
  const path = fileURLToPath(new URL("bad_verb.yaml", FIXTURES));
  await assert.rejects(Registry.load(path), (error: unknown) => {
    assert.ok(error instanceof CatalogueError);
    assert.equal(
      error.message,
      `Cannot load catalogue ${path}: card 'llama-3', field 'verb' (line 5): expected one of chat, complete, embed, rerank, classify, transcribe, got 'talk'`,
    );
    return true;
  });
});

// --- card fields ------------------------------------------------------------------

Deno.test("a card gets defaults: text modality, vllm engine, local = name, no args or env", () => {
  const registry = Registry.parse(GOOD.defaults);
  assert.deepEqual({ ...card(registry, "m") }, {
    name: "m",
    verb: "chat",
    modality: ["text"],
    hub: "org/m",
    local: "m",
    engine: "vllm",
    args: [],
    env: {},
  });
  assert.equal(registry.file, "<inline>");
});

Deno.test("modality accepts one value or a list, without repeats", () => {
  const registry = Registry.parse(GOOD.modalities);
  assert.deepEqual(card(registry, "a").modality, ["audio"]);
  assert.deepEqual(card(registry, "b").modality, ["text", "image"]);
});

Deno.test("args as a mapping render to --key value pairs in order", () => {
  const registry = Registry.parse(GOOD.argsMapping);
  assert.deepEqual(card(registry, "m").args, [
    "--max-model-len",
    "8192",
    "--gpu-memory-utilization",
    "0.85",
    "--enable-prefix-caching",
    "--dtype",
    "bfloat16",
    "--lora-modules",
    "a=/l/a",
    "--lora-modules",
    "b=/l/b",
    "--limit-mm-per-prompt",
    '{"image":2}',
    "--hf-overrides",
    '{"architectures":["X"],"flag":true}',
    "-O3",
    "--seed",
    "7",
  ]);
});

Deno.test("args as a list pass through as literal argv, scalars stringified", () => {
  const registry = Registry.parse(GOOD.argsList);
  assert.deepEqual(card(registry, "m").args, [
    "--max-model-len",
    "4096",
    "-tp",
    "2",
    "--trust-remote-code",
    "true",
  ]);
});

Deno.test("env values are stringified", () => {
  const registry = Registry.parse(GOOD.envScalars);
  assert.deepEqual(card(registry, "m").env, {
    CUDA_VISIBLE_DEVICES: "0",
    VLLM_USE_V1: "true",
    HF_HOME: "/data/hf",
    RATIO: "0.5",
  });
});

Deno.test("an engine: command card keeps its argv template as strings", () => {
  const registry = Registry.parse(GOOD.commandEngine);
  assert.deepEqual(card(registry, "custom").command, [
    "my-engine",
    "--model",
    "{model}",
    "--port",
    "{port}",
    "--workers",
    "2",
  ]);
});

Deno.test("YAML anchors and aliases can share values between cards", () => {
  const registry = Registry.parse(GOOD.anchors);
  assert.deepEqual(card(registry, "b").args, card(registry, "a").args);
});

// --- lookup ------------------------------------------------------------------------

Deno.test("a catalogue of 3,000 cards with nested aliases loads with every alias expanded", () => {
  // npm:yaml's Alias.resolve walks the whole document per alias: 3,000 such
  // cards took about 30 s; read in one walk they take well under a second.
  const lines = [
    "models:",
    "  c0: { verb: chat, hub: org/c0, args: &args { max-model-len: 4096, limit-mm-per-prompt: &mm { image: 2 } } }",
  ];
  for (let i = 1; i < 3_000; i++) {
    lines.push(
      `  c${i}: { verb: chat, hub: org/c${i}, args: ${
        i % 2 ? "*args" : "{ limit-mm-per-prompt: *mm }"
      } }`,
    );
  }
  // Its load time, linear in the cards with aliases, is bench's catalogue row.
  const registry = Registry.parse(lines.join("\n") + "\n");
  assert.equal(registry.size, 3_000);
  assert.deepEqual(registry.get("c2999").args, [
    "--max-model-len",
    "4096",
    "--limit-mm-per-prompt",
    '{"image":2}',
  ]);
  assert.deepEqual(registry.get("c2998").args, [
    "--limit-mm-per-prompt",
    '{"image":2}',
  ]);
});

Deno.test("an alias inside the value it names is reported, not followed for ever", () => {
  assertProblem(
    catalogueError(yaml(
      "models:",
      "  m:",
      "    verb: chat",
      "    hub: org/m",
      "    args: { limit-mm-per-prompt: &loop { image: *loop } }",
    )),
    {
      card: "m",
      field: "args.limit-mm-per-prompt",
      line: 5,
      says:
        /value too large once its aliases are followed \(expected at most 10000 items, 1000 levels deep\)$/,
    },
  );
});

Deno.test("a VERB: spec resolves the same card as the bare name", async () => {
  const registry = await Registry.load();
  const llama = registry.get("llama-3");
  assert.equal(registry.resolve("llama-3"), llama);
  assert.equal(registry.resolve("CHAT:llama-3"), llama);
  assert.equal(registry.resolve("chat:llama-3"), llama);
  assert.equal(registry.resolve("EMBED:bge-m3"), registry.get("bge-m3"));
});

Deno.test("a VERB: spec with the wrong verb warns once and still returns the card", async () => {
  const registry = await Registry.load();
  warnings.length = 0;
  assert.equal(registry.resolve("EMBED:llama-3"), registry.get("llama-3"));
  assert.equal(registry.resolve("EMBED:llama-3"), registry.get("llama-3"));
  assert.equal(warnings.length, 1);
  assert.match(warnings[0] ?? "", /EMBED:llama-3.*chat/);
  registry.resolve("CHAT:llama-3");
  assert.equal(warnings.length, 1);
});

Deno.test("only the text after the first colon is looked up", () => {
  const registry = Registry.parse(
    GOOD.oneCard,
  );
  assert.throws(() => registry.resolve("CHAT:CHAT:m"), KeyError);
  assert.throws(() => registry.resolve("CHAT:"), KeyError);
});

Deno.test("an unknown name throws KeyError suggesting close names", async () => {
  const registry = await Registry.load(SHIPPED_PATH);
  assert.throws(() => registry.get("lama-3"), (error: unknown) => {
    assert.ok(error instanceof KeyError);
    assert.equal(error.name, "KeyError");
    assert.equal(error.model, "lama-3");
    assert.equal(error.suggestions[0], "llama-3");
    assert.ok(error.suggestions.length <= 3);
    assert.match(
      error.message,
      /^Unknown model 'lama-3': not in the shipped catalogue \S+\/catalogue\/optimizers\.yaml \(did you mean llama-3\b.*\? For a model of your own, write a catalogue and pass it with --catalogue\)$/,
    );
    return true;
  });
  const file = await Deno.makeTempFile({ suffix: ".yaml" });
  await Deno.writeTextFile(file, GOOD.twoCards);
  try {
    const own = await Registry.load(file);
    assert.throws(() => own.resolve("CHAT:a-modle"), (error: unknown) => {
      assert.ok(error instanceof KeyError);
      assert.deepEqual(error.suggestions, ["a-model", "b-model"]);
      assert.equal(error.catalogue, file);
      assert.equal(
        error.message,
        `Unknown model 'a-modle': not in the catalogue ${file} (did you mean a-model or b-model?)`,
      );
      return true;
    });
  } finally {
    await Deno.remove(file);
  }
});

Deno.test("an unknown name with nothing close lists the known names", () => {
  const registry = Registry.parse(GOOD.twoCards);
  assert.throws(() => registry.get("zzz"), (error: unknown) => {
    assert.ok(error instanceof KeyError);
    assert.deepEqual(error.suggestions, []);
    assert.equal(
      error.message,
      "Unknown model 'zzz': not in the catalogue <inline> (known: a-model, b-model)",
    );
    return true;
  });
});

Deno.test("an unknown model, shipped catalogue: the line says the shipped catalogue was read and points at --catalogue", async () => {
  for (
    const registry of [await Registry.load(), await Registry.load(SHIPPED_PATH)]
  ) {
    assert.throws(() => registry.resolve("my-model"), (error: unknown) => {
      assert.ok(error instanceof KeyError);
      assert.equal(
        error.message,
        `Unknown model 'my-model': not in the shipped catalogue ${SHIPPED_PATH} (known: ${
          registry.names().slice(0, 10).join(", ")
        } and ${
          registry.size - 10
        } more; for a model of your own, write a catalogue and pass it with --catalogue)`,
      );
      return true;
    });
  }
});

Deno.test("an unknown model in a catalogue of 5,000 cards lists 10 names and how many more", () => {
  const lines = ["models:"];
  for (let i = 0; i < 5_000; i++) {
    lines.push(
      `  model-${String(i).padStart(4, "0")}: { verb: chat, hub: org/m }`,
    );
  }
  const registry = Registry.parse(lines.join("\n") + "\n", "big.yaml");
  assert.throws(() => registry.get("zzz"), (error: unknown) => {
    assert.ok(error instanceof KeyError);
    assert.equal(
      error.message,
      "Unknown model 'zzz': not in the catalogue big.yaml (known: model-0000, model-0001, model-0002, model-0003, model-0004, model-0005, model-0006, model-0007, model-0008, model-0009 and 4990 more)",
    );
    return true;
  });
  assert.throws(() => registry.get("model-O042"), (error: unknown) => {
    assert.ok(error instanceof KeyError);
    assert.ok(error.message.length < 200, error.message);
    assert.match(error.message, /\(did you mean model-0042\b/);
    return true;
  });
});

// --- validation errors -----------------------------------------------------------

Deno.test("a YAML syntax error is reported with its line", () => {
  const error = catalogueError(BAD.syntaxNestedMapping);
  assertProblem(error, {
    card: "m",
    field: "hub",
    line: 4,
    says: /invalid YAML: Nested mappings/,
  });
  assert.equal((error.cause as Error).name, "YAMLParseError");
  assertProblem(
    catalogueError(BAD.syntaxUnclosedList),
    { card: "m", line: 5, says: /invalid YAML: .*end with a \]/ },
  );
  const tabs = catalogueError(BAD.syntaxTab);
  assert.equal(tabs.line, 2);
  assert.match(
    tabs.message,
    /^Cannot load catalogue bad\.yaml: line 2: invalid YAML: Tabs/,
  );
});

Deno.test("a duplicate key is reported with its line", () => {
  assertProblem(
    catalogueError(BAD.duplicateField),
    {
      card: "m",
      field: "verb",
      line: 5,
      says:
        /: duplicate key 'verb' \(expected each field once in a card; the first is on line 3\)$/,
    },
  );
  assertProblem(
    catalogueError(BAD.duplicateCard),
    {
      card: "m",
      line: 3,
      says:
        /: duplicate key 'm' \(expected each card name once; the first is on line 2\)$/,
    },
  );
});

Deno.test("a duplicate flag in args names the flag, the card and the field, not the flag's first letter", () => {
  const error = catalogueError(BAD.duplicateArg);
  assert.equal(
    error.message,
    "Cannot load catalogue bad.yaml: card 'm', field 'args' (line 7): duplicate key 'max-model-len' (expected each flag once in args; the first is on line 6)",
  );
  assertProblem(
    catalogueError(yaml(
      "models:",
      "  m: { verb: chat, hub: org/m, args: { max-model-len: 1, max-model-len: 2 } }",
    )),
    {
      card: "m",
      field: "args",
      line: 2,
      says: /: duplicate key 'max-model-len' \(expected each flag once in args/,
    },
  );
  assertProblem(
    catalogueError(yaml(
      "models:",
      "  m:",
      "    verb: chat",
      "    hub: org/m",
      "    env: { HF_HOME: /a, HF_HOME: /b }",
      "    args: { limit-mm-per-prompt: { image: 1 } }",
    )),
    {
      card: "m",
      field: "env",
      line: 5,
      says: /: duplicate key 'HF_HOME' \(expected each variable once in env;/,
    },
  );
  assertProblem(
    catalogueError(yaml(
      "models:",
      "  m:",
      "    verb: chat",
      "    hub: org/m",
      "    args:",
      "      limit-mm-per-prompt: { image: 1, image: 2 }",
    )),
    {
      card: "m",
      field: "args.limit-mm-per-prompt",
      line: 6,
      says: /: duplicate key 'image' \(expected each key once in a mapping;/,
    },
  );
  // A name written through an alias is the same name.
  assertProblem(
    catalogueError(yaml(
      "models:",
      "  &n m: { verb: chat, hub: org/m }",
      "  *n : { verb: chat, hub: org/n }",
    )),
    { card: "m", line: 3, says: /: duplicate key 'm' \(expected each card/ },
  );
});

Deno.test("an unknown card field is reported with its line", () => {
  assertProblem(
    catalogueError(BAD.unknownField),
    {
      card: "m",
      field: "arg",
      line: 5,
      says: /unknown field.*did you mean args\?/,
    },
  );
});

Deno.test("an unknown top-level field is reported with its line", () => {
  assertProblem(
    catalogueError(BAD.unknownTopLevel),
    { field: "defaults", line: 3, says: /expected only 'models'/ },
  );
});

Deno.test("a bad verb is reported with the values expected", () => {
  assertProblem(
    catalogueError(BAD.badVerb),
    {
      card: "llama-3",
      field: "verb",
      line: 4,
      says:
        /: expected one of chat, complete, embed, rerank, classify, transcribe, got 'talk'$/,
    },
  );
});

Deno.test("a missing verb is reported at the card", () => {
  assertProblem(
    catalogueError(BAD.missingVerb),
    { card: "m", field: "verb", line: 2, says: /missing/ },
  );
});

Deno.test("a bad modality is reported, also inside a list", () => {
  assertProblem(
    catalogueError(BAD.badModality),
    {
      card: "m",
      field: "modality",
      line: 5,
      says: /expected one of text, image, audio, video, got 'smell'/,
    },
  );
  assertProblem(
    catalogueError(BAD.badModalityInList),
    {
      card: "m",
      field: "modality[1]",
      line: 7,
      says: /got 'imgae'.*did you mean image/,
    },
  );
});

Deno.test("a value of the wrong type is reported", () => {
  assertProblem(
    catalogueError(BAD.hubList),
    {
      card: "m",
      field: "hub",
      line: 4,
      says: /expected a hub identifier.*got a list/,
    },
  );
  assertProblem(
    catalogueError(BAD.envList),
    {
      card: "m",
      field: "env",
      line: 5,
      says: /expected a mapping.*got a list/,
    },
  );
});

Deno.test("a card with neither hub nor local is reported", () => {
  assertProblem(
    catalogueError(BAD.neitherHubNorLocal),
    { card: "m", field: "hub", line: 2, says: /neither 'hub' nor 'local'/ },
  );
});

Deno.test("an unknown engine is reported", () => {
  assertProblem(
    catalogueError(BAD.unknownEngine),
    {
      card: "m",
      field: "engine",
      line: 5,
      says: /expected one of vllm, llama\.cpp, sglang, command, got 'ollama'/,
    },
  );
});

Deno.test("engine: command without a command is reported", () => {
  assertProblem(
    catalogueError(BAD.commandMissing),
    {
      card: "m",
      field: "command",
      line: 5,
      says: /missing.*engine is command/,
    },
  );
});

Deno.test("a command on a card of another engine is reported", () => {
  assertProblem(
    catalogueError(BAD.commandWithVllm),
    {
      card: "m",
      field: "command",
      line: 5,
      says: /not allowed with engine vllm/,
    },
  );
});

Deno.test("an engine: command card may name its metrics endpoint and sample names", () => {
  assert.deepEqual(
    card(Registry.parse(GOOD.commandMetrics), "custom").metrics,
    {
      path: "/metrics",
      running: "my:running",
      waiting: "my:waiting",
      promptTokens: "my:prompt_tokens_total",
      generatedTokens: "my:generated_tokens_total",
    },
  );
});

Deno.test("metrics are refused on another engine's card, with a bad or a missing sample name", () => {
  assertProblem(catalogueError(BAD.metricsWithVllm), {
    card: "m",
    field: "metrics",
    line: 5,
    says:
      /not allowed with engine vllm \(expected only with engine: command; the other engines name their own\)/,
  });
  assertProblem(catalogueError(BAD.metricsBadName), {
    card: "m",
    field: "metrics.prompt_tokens",
    line: 7,
    says: /expected a Prometheus sample name/,
  });
  assertProblem(catalogueError(BAD.metricsMissingName), {
    card: "m",
    field: "metrics",
    line: 7,
    says: /generated_tokens is missing/,
  });
  for (const text of [BAD.metricsWithVllm, BAD.metricsBadName]) {
    assert.equal(catalogueError(text).message.split("\n").length, 1);
  }
});

Deno.test("a card may set stall_timeout (seconds, 0: off) and canary; bad values are refused in one line", () => {
  const cards = Registry.parse(GOOD.serving);
  assert.equal(card(cards, "patient").stallTimeout, 900);
  assert.equal(card(cards, "patient").canary, false);
  assert.equal(card(cards, "unwatched").stallTimeout, 0);
  assert.equal(card(cards, "unwatched").canary, true);
  assertProblem(catalogueError(BAD.stallTimeoutNegative), {
    card: "m",
    field: "stall_timeout",
    line: 2,
    says:
      /expected 0 \(no stall detection\) or a decimal number of seconds from 0\.001 to 2147483\.647 \(a timer holds at most 2\^31-1 ms, about 24\.8 days\), got -5$/,
  });
  assertProblem(catalogueError(BAD.canaryNotBoolean), {
    card: "m",
    field: "canary",
    line: 2,
    says: /expected true or false, got/,
  });
  for (const text of [BAD.stallTimeoutNegative, BAD.canaryNotBoolean]) {
    assert.equal(catalogueError(text).message.split("\n").length, 1);
  }
});

Deno.test("a card name that is not safe as a file name is reported", () => {
  assertProblem(
    catalogueError(BAD.unsafeName),
    { card: "../evil", line: 3, says: /bad card name/ },
  );
  assertProblem(
    catalogueError(BAD.nameCaseClash),
    { card: "llama", line: 3, says: /only in case/ },
  );
});

Deno.test("a card name longer than 128 characters is refused: it becomes file names that must fit in 255 bytes", () => {
  const longest = `m${"x".repeat(127)}`;
  assert.ok(
    Registry.parse(`models:\n  ${longest}: { verb: chat, hub: org/m }\n`)
      .has(longest),
  );
  for (const length of [129, 250, 300]) {
    const name = `m${"x".repeat(length - 1)}`;
    const error = catalogueError(yaml(
      "models:",
      "  ok: { verb: chat, hub: org/ok }",
      `  ${name}: { verb: chat, hub: org/m }`,
    ));
    assert.equal(
      error.message,
      `Cannot load catalogue bad.yaml: card '${name}' (line 3): card name of ${length} characters (expected at most 128: the name becomes file names such as logs/<name>.log and data/<name>.engine.json, which must fit in 255 bytes)`,
    );
    assert.equal(error.card, name);
  }
  assertProblem(catalogueError(BAD.longName), {
    card: `m${"x".repeat(128)}`,
    line: 2,
    says: /card name of 129 characters \(expected at most 128/,
  });
  // A name written through an alias is checked as the name it becomes.
  assertProblem(
    catalogueError(yaml(
      "models:",
      `  ok: { verb: chat, hub: org/ok, description: &n ${"n".repeat(200)} }`,
      "  *n : { verb: chat, hub: org/m }",
    )),
    { card: "n".repeat(200), line: 3, says: /card name of 200 characters/ },
  );
});

Deno.test("a local path with '..' or an absolute local path is reported", () => {
  assertProblem(
    catalogueError(BAD.localDotDot),
    { card: "m", field: "local", line: 4, says: /no '\.\.' segments/ },
  );
  assertProblem(
    catalogueError(BAD.localAbsolute),
    { card: "m", field: "local", line: 4, says: /absolute path/ },
  );
});

Deno.test("a null arg is reported with its flag", () => {
  assertProblem(
    catalogueError(BAD.nullArg),
    { card: "m", field: "args.max-model-len", line: 6, says: /got null/ },
  );
});

Deno.test("a bad env name or value is reported", () => {
  assertProblem(
    catalogueError(BAD.badEnvName),
    {
      card: "m",
      field: "env.BAD-NAME",
      line: 6,
      says: /expected a variable name/,
    },
  );
  assertProblem(
    catalogueError(BAD.envMapping),
    { card: "m", field: "env.GOOD", line: 6, says: /got a mapping/ },
  );
});

Deno.test("a top level without a non-empty models mapping is reported", () => {
  assertProblem(catalogueError(BAD.emptyModels), {
    field: "models",
    line: 1,
    says: /non-empty mapping.*got an empty mapping/,
  });
  assert.match(
    catalogueError(BAD.empty).message,
    /^Cannot load catalogue bad\.yaml: /,
  );
  assert.match(
    catalogueError(BAD.topLevelList).message,
    /expected a mapping.*got a list/,
  );
});

Deno.test("an alias to an unknown anchor is reported", () => {
  assertProblem(
    catalogueError(BAD.unknownAnchor),
    { card: "m", field: "args", line: 5, says: /unknown anchor 'nothing'/ },
  );
});

Deno.test("a gpus value that is not 0, a whole number or a share is reported", () => {
  for (const text of [BAD.gpusOneAndAHalf, BAD.gpusNegative, BAD.gpusText]) {
    assertProblem(catalogueError(text), {
      card: "m",
      field: "gpus",
      line: 2,
      says: /expected 0 \(no GPU\), a whole number of GPUs/,
    });
  }
  const registry = Registry.parse(GOOD.gpus);
  assert.deepEqual(
    [...registry].map((card) => [card.name, card.gpus]),
    [["cpu", 0], ["pair", 2], ["share", 0.3]],
  );
});

Deno.test("gpu_memory: a size in bytes, binary or decimal units; another unit, under 1 MiB, 300 digits or a boolean is reported", () => {
  for (
    const text of [BAD.gpuMemoryUnit, BAD.gpuMemoryTiny, BAD.gpuMemoryBoolean]
  ) {
    assertProblem(catalogueError(text), {
      card: "m",
      field: "gpu_memory",
      line: 2,
      says: /expected a size from 1MiB to 1PiB such as 24GiB, 512MiB or 20GB/,
    });
  }
  // 300 digits: Infinity (with a unit) or 1e300 bytes, no device's size.
  for (const huge of [`${"9".repeat(300)}GiB`, `"${"9".repeat(300)}"`]) {
    assertProblem(
      catalogueError(
        `models:\n  m: { verb: chat, hub: org/m, gpu_memory: ${huge} }\n`,
      ),
      {
        card: "m",
        field: "gpu_memory",
        line: 2,
        says: /expected a size from 1MiB to 1PiB such as 24GiB/,
      },
    );
  }
  assert.deepEqual(
    [...Registry.parse(GOOD.gpuMemory)].map((card) => card.gpuMemory),
    [24 * 2 ** 30, 512 * 2 ** 20, 20e9, 2 ** 31, 1.5 * 2 ** 30],
  );
});

Deno.test("sleep_after: whole idle seconds, 0 for never, read as sleepAfter; a fraction or below 0 is reported naming the card and the field", () => {
  for (const text of [BAD.sleepAfterFraction, BAD.sleepAfterNegative]) {
    assertProblem(catalogueError(text), {
      card: "m",
      field: "sleep_after",
      line: 2,
      says: /expected 0 \(never\) or a whole number of idle seconds/,
    });
  }
  assert.deepEqual(
    [...Registry.parse(GOOD.sleepAfter)].map((c) => [c.name, c.sleepAfter]),
    [["dozy", 600], ["awake", 0]],
  );
});

Deno.test("drain_timeout: seconds, 0 or more, read as drainTimeout; below 0 or a word is reported", () => {
  for (const text of [BAD.drainTimeoutNegative, BAD.drainTimeoutText]) {
    assertProblem(catalogueError(text), {
      card: "m",
      field: "drain_timeout",
      line: 2,
      says:
        /expected 0 \(no drain\) or a decimal number of seconds from 0\.001/,
    });
  }
  const registry = Registry.parse(GOOD.drainTimeout);
  assert.deepEqual(
    [...registry].map((card) => [card.name, card.drainTimeout]),
    [["off", 0], ["long", 120], ["short", 0.5]],
  );
});

Deno.test("failed_retry, drain_timeout and stall_timeout refuse what a timer cannot hold, hex, and what rounds to 0 ms", () => {
  const cases = [
    [BAD.failedRetryOverflow, "failed_retry", "never tried again", "2592000"],
    [BAD.drainTimeoutHex, "drain_timeout", "no drain", "16"],
    [BAD.stallTimeoutUnderMs, "stall_timeout", "no stall detection", "0.0004"],
  ] as const;
  for (const [text, field, zero, got] of cases) {
    const error = catalogueError(text);
    assertProblem(error, { card: "m", field, line: 2, says: /./ });
    assert.ok(
      error.message.endsWith(
        `expected 0 (${zero}) or a decimal number of seconds from 0.001 to 2147483.647 (a timer holds at most 2^31-1 ms, about 24.8 days), got ${got}`,
      ),
      error.message,
    );
  }
  // The longest a timer holds, and the shortest above 0, are taken.
  const edges = Registry.parse(
    "models:\n  m: { verb: chat, hub: org/m, failed_retry: 2147483.647, drain_timeout: 0.001 }\n",
  );
  assert.equal(card(edges, "m").failedRetry, 2147483.647);
  assert.equal(card(edges, "m").drainTimeout, 0.001);
});

Deno.test("a catalogue error keeps the spacing of the value it quotes, on one line", () => {
  const error = catalogueError(
    "models:\n  m:\n    verb: 'ch  at'\n    hub: org/m\n",
  );
  assert.match(error.message, /got 'ch {2}at'/);
  assert.ok(!error.message.includes("\n"));
});
