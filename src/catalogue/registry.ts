/**
 * A loaded catalogue ({@linkcode Registry}) and the catalogue shipped with the
 * package ({@linkcode DEFAULT_CATALOGUE}).
 *
 * @module
 */
import { log } from "../common/log.ts";
import {
  CatalogueError,
  KeyError,
  type KeyErrorOptions,
} from "./catalogue_error.ts";
import { type ModelCard, Verb } from "./model_card.ts";
import { readCatalogue } from "./card_reader.ts";
import { type CardSites, expandCard } from "./card_expand.ts";

const VERBS: readonly Verb[] = Object.values(Verb);
/** Any `scheme://`: a URL, never a path (an `ftp://` one is refused, not looked up as a file). */
const URL_LIKE = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//;
const SCHEMES = ["file:", "http:", "https:"];
const URL_TIMEOUT_MS = 10_000;

/** Options of {@linkcode Registry.load}. */
export interface LoadOptions {
  /**
   * How long an `http:` or `https:` catalogue may take to arrive, whole body
   * included, in milliseconds.
   *
   * @default {10000}
   */
  timeout?: number;
}

/**
 * A loaded catalogue as plain data ({@linkcode Registry.toParsed}): it
 * survives `postMessage` (structured clone), so a catalogue read in a Worker
 * becomes a {@linkcode Registry} again on the other side
 * ({@linkcode Registry.fromParsed}) without parsing the YAML twice.
 */
export interface ParsedCatalogue {
  /** The file (or URL, or `<inline>`) the catalogue came from. */
  readonly file: string;
  /** Whether it is the catalogue shipped with the package. */
  readonly shipped: boolean;
  /** The cards, in catalogue (file) order. */
  readonly cards: readonly ModelCard[];
  /** Where each card's expandable values are written, parallel to `cards`. */
  readonly sites: readonly CardSites[];
}

/**
 * The catalogue shipped with the package.
 *
 * @example
 * ```ts
 * import { DEFAULT_CATALOGUE, Registry } from "@mymodel/serve/catalogue";
 * const registry = await Registry.load(DEFAULT_CATALOGUE);
 * console.log(registry.size);
 * ```
 */
export const DEFAULT_CATALOGUE: URL = new URL(
  "../../catalogue/optimizers.yaml",
  import.meta.url,
);

/**
 * A loaded catalogue: the model cards by name.
 *
 * @example
 * ```ts
 * import { Registry } from "@mymodel/serve/catalogue";
 *
 * const registry = Registry.parse(`
 * models:
 *   my-model:
 *     verb: chat
 *     hub: org/my-model
 *     args: { max-model-len: 4096 }
 * `);
 * console.log(registry.get("my-model").args); // ["--max-model-len", "4096"]
 * ```
 */
export class Registry implements Iterable<ModelCard> {
  /** The file (or URL, or `<inline>`) the catalogue came from. */
  readonly file: string;
  #cards: ReadonlyMap<string, ModelCard>;
  #sites: ReadonlyMap<string, CardSites>;
  #warned = new Set<string>();
  #shipped: boolean;

  private constructor(
    file: string,
    cards: ReadonlyMap<string, ModelCard>,
    sites: ReadonlyMap<string, CardSites>,
    shipped = false,
  ) {
    this.file = file;
    this.#cards = cards;
    this.#sites = sites;
    this.#shipped = shipped;
  }

  /**
   * Reads and validates a catalogue.
   *
   * @param source A file path, or a URL. A `file:` URL is read from the file
   *   system (so the shipped catalogue is found inside a `deno compile` binary,
   *   whose embedded files `fetch` cannot read); an `http:` or `https:` URL with
   *   `fetch` (so it loads when this module runs from a remote registry). A
   *   string starting with `<scheme>://` is taken as a URL; other schemes are
   *   refused.
   * @param options How long a URL catalogue may take.
   * @returns The registry.
   * @throws {CatalogueError} When the catalogue cannot be read or is not valid:
   *   a missing file, an unsupported scheme, a server that cannot be reached,
   *   answers with an error status or not within the timeout.
   *
   * @example
   * ```ts
   * import { Registry } from "@mymodel/serve/catalogue";
   * const registry = await Registry.load();
   * console.log(registry.has("llama-3")); // true
   * ```
   */
  static async load(
    source: string | URL = DEFAULT_CATALOGUE,
    options: LoadOptions = {},
  ): Promise<Registry> {
    const url = typeof source === "string"
      ? (URL_LIKE.test(source) ? URL.parse(source) : undefined)
      : source;
    if (url === null) {
      throw new CatalogueError(
        String(source),
        "not a valid URL (expected a file path, or an http:, https: or file: URL)",
      );
    }
    const file = url === undefined ? String(source) : displayName(url);
    if (url !== undefined && !SCHEMES.includes(url.protocol)) {
      throw new CatalogueError(
        file,
        `unsupported URL scheme '${url.protocol}' (expected a file path, or an http:, https: or file: URL)`,
      );
    }
    let text: string;
    try {
      text = url === undefined
        ? await Deno.readTextFile(file)
        : url.protocol === "file:"
        ? await Deno.readTextFile(url)
        : await fetchText(url, file, options.timeout ?? URL_TIMEOUT_MS);
    } catch (error) {
      if (error instanceof CatalogueError) throw error;
      throw new CatalogueError(file, errorText(error), { cause: error });
    }
    const { cards, sites } = readCatalogue(text, file);
    // An operator who never passed --catalogue may not know one was read.
    const shipped = url?.href === DEFAULT_CATALOGUE.href ||
      file === displayName(DEFAULT_CATALOGUE);
    return new Registry(file, cards, sites, shipped);
  }

  /**
   * Validates a catalogue given as text.
   *
   * @param text The YAML text.
   * @param file The name used in error messages.
   * @returns The registry.
   * @throws {CatalogueError} When the catalogue is not valid.
   *
   * @example
   * ```ts
   * import { Registry } from "@mymodel/serve/catalogue";
   * const registry = Registry.parse("models:\n  e5:\n    verb: embed\n    hub: intfloat/e5-small-v2\n");
   * console.log(registry.get("e5").engine); // "vllm"
   * ```
   */
  static parse(text: string, file = "<inline>"): Registry {
    const { cards, sites } = readCatalogue(text, file);
    return new Registry(file, cards, sites);
  }

  /**
   * The registry as plain, structured-clonable data, for
   * {@linkcode Registry.fromParsed} on the other side of a `postMessage`.
   *
   * @returns The cards and their value sites, in catalogue order.
   *
   * @example
   * ```ts
   * import { Registry } from "@mymodel/serve/catalogue";
   * const parsed = (await Registry.load()).toParsed();
   * console.log(Registry.fromParsed(structuredClone(parsed)).has("llama-3")); // true
   * ```
   */
  toParsed(): ParsedCatalogue {
    const cards = [...this.#cards.values()];
    return {
      file: this.file,
      shipped: this.#shipped,
      cards,
      sites: cards.map((card) => this.#sites.get(card.name)!),
    };
  }

  /**
   * A registry again from {@linkcode Registry.toParsed}'s data, as it arrives
   * from `postMessage`: the cards frozen again as the reader froze them, and
   * nothing validated again (the data came from a registry).
   *
   * @param parsed What `toParsed()` returned, possibly structured-cloned.
   * @returns The registry, equal to the one `parsed` came from.
   *
   * @example
   * ```ts
   * import { Registry } from "@mymodel/serve/catalogue";
   * const registry = Registry.parse("models:\n  e5: { verb: embed, hub: intfloat/e5-small-v2 }\n");
   * const copy = Registry.fromParsed(structuredClone(registry.toParsed()));
   * console.log(copy.get("e5").hub); // "intfloat/e5-small-v2"
   * ```
   */
  static fromParsed(parsed: ParsedCatalogue): Registry {
    const cards = new Map<string, ModelCard>();
    const sites = new Map<string, CardSites>();
    parsed.cards.forEach((card, i) => {
      cards.set(
        card.name,
        refreeze(card, ["modality", "args", "env", "command"]),
      );
      sites.set(
        card.name,
        refreeze(parsed.sites[i]!, ["args", "env", "command"]),
      );
    });
    return new Registry(parsed.file, cards, sites, parsed.shipped);
  }

  /**
   * How many cards the catalogue holds.
   *
   * @returns The number of cards.
   *
   * @example
   * ```ts
   * import { Registry } from "@mymodel/serve/catalogue";
   * console.log((await Registry.load()).size > 0); // true
   * ```
   */
  get size(): number {
    return this.#cards.size;
  }

  /**
   * Every catalogue name.
   *
   * @returns The names, sorted ascending.
   *
   * @example
   * ```ts
   * import { Registry } from "@mymodel/serve/catalogue";
   * console.log((await Registry.load()).names().includes("llama-3")); // true
   * ```
   */
  names(): string[] {
    return [...this.#cards.keys()].sort();
  }

  /**
   * Whether a name is in the catalogue.
   *
   * @param name A catalogue name (no verb prefix).
   * @returns True when a card has that name.
   *
   * @example
   * ```ts
   * import { Registry } from "@mymodel/serve/catalogue";
   * console.log((await Registry.load()).has("no-such-model")); // false
   * ```
   */
  has(name: string): boolean {
    return this.#cards.has(name);
  }

  /**
   * Looks a card up by its exact name.
   *
   * @param name A catalogue name (no verb prefix).
   * @returns The card.
   * @throws {KeyError} When no card has that name; the message names the
   *   catalogue (the shipped one: so it says, and points at `--catalogue`) and
   *   suggests close names, or lists the first few.
   *
   * @example
   * ```ts
   * import { Registry } from "@mymodel/serve/catalogue";
   * console.log((await Registry.load()).get("llama-3").verb); // "chat"
   * ```
   */
  get(name: string): ModelCard {
    const card = this.#cards.get(name);
    if (card === undefined) throw this.#unknown(name);
    return card;
  }

  /**
   * Looks a card up by a model spec: `<name>` or `<VERB>:<name>`. Only the text
   * after the first colon is looked up; a verb prefix that does not match the
   * card's verb (compared case-insensitively) is logged once as a warning, and
   * the card is returned anyway.
   *
   * @param spec The model spec, e.g. `llama-3` or `CHAT:llama-3`.
   * @returns The card.
   * @throws {KeyError} When no card has that name.
   *
   * @example
   * ```ts
   * import { Registry } from "@mymodel/serve/catalogue";
   * const registry = await Registry.load();
   * console.log(registry.resolve("CHAT:llama-3") === registry.get("llama-3")); // true
   * ```
   */
  resolve(spec: string): ModelCard {
    const colon = spec.indexOf(":");
    if (colon < 0) return this.get(spec);
    const prefix = spec.slice(0, colon);
    const card = this.get(spec.slice(colon + 1));
    if (prefix.toLowerCase() !== card.verb && !this.#warned.has(spec)) {
      this.#warned.add(spec);
      const known = (VERBS as readonly string[]).includes(prefix.toLowerCase())
        ? ""
        : ` ('${prefix}' is not a verb: expected one of ${VERBS.join(", ")})`;
      log.warn(
        `Model spec '${spec}' asks for ${prefix} but '${card.name}' is a ${card.verb} model${known}; serving it as ${card.verb}`,
      );
    }
    return card;
  }

  /**
   * The card with its per-node values filled in: every `${NAME}` in its
   * `executable`, `command`, `args` values and `env` values replaced from `env`,
   * every `$${` turned into a literal `${`. The registry keeps the card as
   * written; the launcher expands only the cards it is asked to start, so an
   * unused card may name variables that are not set.
   *
   * @param card A card of this registry.
   * @param env The environment to read: the launcher's, as its config captured it.
   * @returns The expanded card (frozen), or `card` itself when it has nothing to expand.
   * @throws {UnsetVariableError} When a variable is not set in `env`; the one-line
   *   message names the file, card, field, line and variable.
   * @throws {KeyError} When no card of this registry has `card`'s name.
   * @throws {TypeError} When `card` is not the registry's own card (an expanded or hand-made one).
   *
   * @example
   * ```ts
   * import { Registry } from "@mymodel/serve/catalogue";
   *
   * const registry = Registry.parse(`
   * models:
   *   ds:
   *     verb: chat
   *     hub: org/ds
   *     engine: sglang
   *     args: { node-rank: "\${NODE_RANK}" }
   * `);
   * const card = registry.expand(registry.get("ds"), { NODE_RANK: "1" });
   * console.log(card.args); // ["--node-rank", "1"]
   * ```
   */
  expand(
    card: ModelCard,
    env: Readonly<Record<string, string | undefined>>,
  ): ModelCard {
    const sites = this.#sites.get(card.name);
    if (sites === undefined) throw this.#unknown(card.name);
    if (this.#cards.get(card.name) !== card) {
      // An expanded card's `${` may come from `$${`: expanding it again would be wrong.
      throw new TypeError(
        `Cannot expand card '${card.name}': not the card this registry holds (expected the card get() or resolve() returns, unexpanded)`,
      );
    }
    return expandCard(card, env, this.file, sites);
  }

  /**
   * Iterates over the cards in catalogue (file) order.
   *
   * @returns An iterator over the cards.
   *
   * @example
   * ```ts
   * import { Registry } from "@mymodel/serve/catalogue";
   * for (const card of await Registry.load()) console.log(card.name, card.verb);
   * ```
   */
  [Symbol.iterator](): IterableIterator<ModelCard> {
    return this.#cards.values();
  }

  #unknown(name: string): KeyError {
    const options: KeyErrorOptions = { catalogue: this.file };
    if (this.#shipped) options.shipped = true;
    return new KeyError(name, this.#cards.keys(), options);
  }
}

/**
 * The body of a URL: a server that never answers, or stops half-way, must not
 * hang a start or a reload.
 */
async function fetchText(
  url: URL,
  file: string,
  timeout: number,
): Promise<string> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeout);
  try {
    const response = await fetch(url, { signal: controller.signal });
    if (!response.ok) {
      await response.body?.cancel();
      throw new CatalogueError(
        file,
        `the server answered ${
          `${response.status} ${response.statusText}`.trim()
        } (expected 200 with the catalogue's YAML)`,
      );
    }
    return await response.text();
  } catch (error) {
    if (error instanceof CatalogueError) throw error;
    if (controller.signal.aborted) {
      throw new CatalogueError(
        file,
        `no complete answer within ${
          timeout / 1000
        } s (expected the server to send the catalogue within ${
          timeout / 1000
        } s)`,
        { cause: error },
      );
    }
    // Deno's "fetch failed" says what went wrong only in its cause.
    const reason = error instanceof Error && error.cause instanceof Error
      ? error.cause.message
      : error instanceof Error
      ? error.message
      : String(error);
    throw new CatalogueError(
      file,
      `cannot fetch it: ${
        reason
          .replace(/^error sending request for url \([^)]*\): /, "")
          .replace(/^client error \(Connect\): /, "")
          .replace(/^Fetch failed: /, "")
      } (expected a reachable HTTP server serving the catalogue at that URL)`,
      { cause: error },
    );
  } finally {
    clearTimeout(timer);
  }
}

/** `value` and its `fields` frozen, as the card reader leaves them (a structured clone thaws them). */
function refreeze<T extends object>(value: T, fields: readonly string[]): T {
  for (const field of fields) {
    const inner = (value as Record<string, unknown>)[field];
    if (typeof inner === "object" && inner !== null) Object.freeze(inner);
  }
  return Object.freeze(value);
}

function displayName(url: URL): string {
  if (url.protocol !== "file:") return url.href;
  const path = decodeURIComponent(url.pathname);
  return /^\/[A-Za-z]:\//.test(path) ? path.slice(1) : path;
}

function errorText(error: unknown): string {
  return error instanceof Error
    ? `${error.name}: ${error.message}`
    : String(error);
}
