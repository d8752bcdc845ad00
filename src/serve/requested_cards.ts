/**
 * The requested models' cards, as start and reload resolve them: each spec
 * looked up in the catalogue, its `${NAME}` values filled in from the
 * launcher's environment (requested cards only), each model at most once.
 *
 * @module
 */
import type { ModelCard, Registry } from "../catalogue.ts";
import { ConfigError } from "../common/config_error.ts";

/**
 * Resolves and expands the requested cards, in request order.
 *
 * @param registry The loaded catalogue.
 * @param specs The model specs (`llama-3`, `CHAT:llama-3`).
 * @param doing `start` or `reload`, for the message.
 * @returns The expanded cards.
 * @throws {KeyError | CatalogueError} For an unknown model or an unset `${NAME}`.
 * @throws {ConfigError} When a model is requested twice.
 *
 * @example
 * ```ts ignore
 * requestedCards(await Registry.load(), ["llama-3"], "start");
 * ```
 */
export function requestedCards(
  registry: Registry,
  specs: readonly string[],
  doing: "start" | "reload",
): ModelCard[] {
  const cards: ModelCard[] = [];
  const env = Deno.env.toObject();
  for (const spec of specs) {
    const card = registry.expand(registry.resolve(spec), env);
    if (cards.some((c) => c.name === card.name)) {
      throw new ConfigError(
        `Cannot ${doing}: model '${card.name}' is requested twice (expected each model once)`,
      );
    }
    cards.push(card);
  }
  return cards;
}
