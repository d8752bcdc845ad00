/**
 * A fresh process that loads one catalogue with `Registry.load` and prints
 * `{"ms": …, "cards": …}`: the time of the load alone, module loading
 * excluded. Run by the catalogue phase (`bench/phases/catalogue.ts`).
 *
 * @module
 */
import { Registry } from "../../src/catalogue.ts";

const started = performance.now();
const registry = await Registry.load(Deno.args[0] ?? "");
const ms = performance.now() - started;
console.log(JSON.stringify({ ms, cards: registry.size }));
