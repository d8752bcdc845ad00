/** What a plan does to each engine (src/serve/card_change.ts): a pure function of what runs and the cards. */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import { type ModelCard, Registry } from "../../src/catalogue.ts";
import { cardChange, engineChanges } from "../../src/serve/card_change.ts";

function cardOf(fields: Record<string, unknown>, name = "m"): ModelCard {
  return Registry.parse(
    stringify({
      models: { [name]: { verb: "chat", hub: "org/m", ...fields } },
    }),
    "reload.yaml",
  ).get(name);
}

const BASE = { args: { "max-model-len": 4096 }, env: { A: "1", B: "2" } };

Deno.test("a card read again unchanged is the same", () => {
  assert.equal(cardChange(cardOf(BASE), cardOf(BASE)), "same");
});

Deno.test("the order of env keys is not a change", () => {
  assert.equal(
    cardChange(cardOf(BASE), cardOf({ ...BASE, env: { B: "2", A: "1" } })),
    "same",
  );
});

for (
  const [what, fields] of [
    ["args", { args: { "max-model-len": 8192 } }],
    ["env", { env: { A: "1", B: "3" } }],
    ["executable", { executable: "/opt/vllm/bin/vllm" }],
    ["engine", { engine: "sglang" }],
    ["hub", { hub: "org/other" }],
    ["local", { local: "elsewhere" }],
    ["gpus", { gpus: 2 }],
  ] as const
) {
  Deno.test(`a changed ${what} reaches the engine: restart`, () => {
    assert.equal(
      cardChange(cardOf(BASE), cardOf({ ...BASE, ...fields })),
      "restart",
    );
  });
}

for (
  const [what, fields] of [
    ["restart policy", { restart: "never" }],
    ["description", { description: "for people" }],
    ["verb", { verb: "complete" }],
    ["modality", { modality: ["text", "image"] }],
    ["stall_timeout", { stall_timeout: 60 }],
    ["canary", { canary: false }],
    ["drain timeout", { drain_timeout: 5 }],
  ] as const
) {
  Deno.test(`a changed ${what} does not reach the engine: amend`, () => {
    assert.equal(
      cardChange(cardOf(BASE), cardOf({ ...BASE, ...fields })),
      "amend",
    );
  });
}

Deno.test("a change reaching the engine wins over one that does not", () => {
  assert.equal(
    cardChange(
      cardOf(BASE),
      cardOf({ ...BASE, restart: "never", args: { "max-model-len": 1 } }),
    ),
    "restart",
  );
});

Deno.test("engineChanges sorts engines by change, in request order", () => {
  const before = [cardOf(BASE, "a"), cardOf(BASE, "b"), cardOf(BASE, "c")];
  const after = [
    cardOf({ ...BASE, description: "x" }, "a"),
    cardOf(BASE, "b"),
    cardOf({ ...BASE, gpus: 0 }, "c"),
  ];
  assert.deepEqual(engineChanges(before.map((card) => ({ card })), after), {
    start: [],
    restart: ["c"],
    amend: ["a"],
    same: ["b"],
    retry: [],
  });
});

Deno.test("a start starts every engine; a failed engine is retried unless its card restarts it anyway", () => {
  const cards = [cardOf(BASE, "a"), cardOf(BASE, "b"), cardOf(BASE, "c")];
  assert.deepEqual(engineChanges(undefined, cards).start, ["a", "b", "c"]);
  const after = [
    cardOf({ ...BASE, description: "x" }, "a"),
    cardOf(BASE, "b"),
    cardOf({ ...BASE, gpus: 0 }, "c"),
  ];
  const running = cards.map((card) => ({ card }));
  assert.deepEqual(engineChanges(running, after, ["a", "b", "c"]), {
    start: [],
    restart: ["c"],
    amend: [],
    same: [],
    retry: ["a", "b"],
  });
});

Deno.test("engineChanges refuses lists naming different engines", () => {
  assert.throws(
    () => engineChanges([{ card: cardOf(BASE, "a") }], [cardOf(BASE, "b")]),
    /Cannot compare the cards: \[a\] and \[b\]/,
  );
});
