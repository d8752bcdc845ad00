import { log } from "../common/log.ts";
import { readCapped, readFileCapped } from "../common/read_capped.ts";
import { abortAfter } from "../common/sleep.ts";
import { CatalogueError, KeyError } from "./catalogue_error.ts";
import { type ModelCard, Verb } from "./model_card.ts";
import { expandCard, type ReadCard, readCatalogue } from "./card_reader.ts";

const VERBS: readonly string[] = Object.values(Verb);
/** Any `scheme://` is a URL, never a path: an `ftp://` one is refused, not looked up as a file. */
const URL_LIKE = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//;
const SOURCES = "a file path, or an http:, https: or file: URL";
/** A file or URL body past this is refused: `/dev/zero` or an endless body grew the launcher until the OOM killer came. */
const MAX_BYTES = 16 * 1024 * 1024;

/** Options of {@linkcode Registry.load}. */
export interface LoadOptions {
  /** How long an `http:` or `https:` catalogue may take to arrive, body included, in ms. @default {10000} */
  timeout?: number;
  /** Ends the load; a reason that is an `Error` (`controller.abort(new Error("…"))`) is the {@linkcode CatalogueError}'s detail. */
  signal?: AbortSignal;
}

export const DEFAULT_CATALOGUE: URL = new URL(
  "../../catalogue/optimizers.yaml",
  import.meta.url,
);

/**
 * A loaded catalogue: the model cards by name, in file order.
 *
 * @example
 * ```ts
 * import { Registry } from "@mymodel/serve/catalogue";
 * const registry = Registry.parse(
 *   'models:\n  m: { verb: chat, hub: org/m, args: { max-model-len: "${LEN}" } }\n',
 * );
 * const card = registry.get("m"); // args: ["--max-model-len", "${LEN}"]
 * console.log(registry.expand(card, { LEN: "4096" }).args); // ["--max-model-len", "4096"]
 * ```
 */
export class Registry implements Iterable<ModelCard> {
  /** The file (or URL, or `<inline>`) the catalogue came from. */
  readonly file: string;
  #cards: ReadonlyMap<string, ReadCard>;
  #warned = new Set<string>();
  #shipped: boolean;

  private constructor(text: string, file: string, shipped = false) {
    this.#cards = readCatalogue(text, file);
    this.file = file;
    this.#shipped = shipped;
  }

  /**
   * Reads and validates a catalogue from a file path or an `http:`, `https:`
   * or `file:` URL: at most 16 MiB, and only a regular file (never a FIFO or
   * a device).
   *
   * @throws {CatalogueError} When it cannot be read or is not valid.
   */
  static async load(
    source: string | URL = DEFAULT_CATALOGUE,
    { signal, timeout = 10_000 }: LoadOptions = {},
  ): Promise<Registry> {
    const url = typeof source === "string"
      ? (URL_LIKE.test(source) ? URL.parse(source) : undefined)
      : source;
    const invalid = `not a valid URL (expected ${SOURCES})`;
    if (url === null) throw new CatalogueError(String(source), invalid);
    const file = url === undefined ? String(source) : displayName(url);
    if (url && !["file:", "http:", "https:"].includes(url.protocol)) {
      throw new CatalogueError(
        file,
        `unsupported URL scheme '${url.protocol}' (expected ${SOURCES})`,
      );
    }
    let text: string;
    try {
      signal?.throwIfAborted();
      text = url === undefined || url.protocol === "file:"
        ? await readFileText(url ?? file, file, signal)
        : await fetchText(url, file, timeout, signal);
      signal?.throwIfAborted();
    } catch (error) {
      if (signal?.aborted) throw stopped(file, signal.reason);
      if (error instanceof CatalogueError) throw error;
      throw new CatalogueError(
        file,
        error instanceof Error
          ? `${error.name}: ${error.message}`
          : String(error),
        { cause: error },
      );
    }
    // An operator who never passed --catalogue may not know one was read.
    return new Registry(text, file, file === displayName(DEFAULT_CATALOGUE));
  }

  /** Validates a catalogue given as text; `file` names it in messages. */
  static parse(text: string, file = "<inline>"): Registry {
    return new Registry(text, file);
  }

  /** How many cards the catalogue holds. */
  get size(): number {
    return this.#cards.size;
  }

  /** Every catalogue name, sorted. */
  names(): string[] {
    return [...this.#cards.keys()].sort();
  }

  /** Whether a card has this name (no verb prefix). */
  has(name: string): boolean {
    return this.#cards.has(name);
  }

  /** The card of an exact name; a {@linkcode KeyError} suggesting close names when none has it. */
  get(name: string): ModelCard {
    const read = this.#cards.get(name);
    if (read === undefined) throw this.#unknown(name);
    return read.card;
  }

  /**
   * The card of a model spec, `<name>` or `<VERB>:<name>` (`CHAT:llama-3`).
   * A verb prefix that is not the card's verb is logged once as a warning;
   * the card is served. A {@linkcode KeyError} when no card has that name.
   */
  resolve(spec: string): ModelCard {
    const colon = spec.indexOf(":");
    if (colon < 0) return this.get(spec);
    const prefix = spec.slice(0, colon);
    const card = this.get(spec.slice(colon + 1));
    if (prefix.toLowerCase() !== card.verb && !this.#warned.has(spec)) {
      this.#warned.add(spec);
      const known = VERBS.includes(prefix.toLowerCase())
        ? ""
        : ` ('${prefix}' is not a verb: expected one of ${VERBS.join(", ")})`;
      log.warn(
        `Model spec '${spec}' asks for ${prefix} but '${card.name}' is a ${card.verb} model${known}; serving it as ${card.verb}`,
      );
    }
    return card;
  }

  /**
   * The card with every `${NAME}` in its `executable`, `command`, `args`
   * values and `env` values replaced from `env`, and `$${` made a literal
   * `${`. Only the cards a launcher starts are expanded, so an unused card
   * may name unset variables. Returns `card` itself when nothing changes.
   *
   * @throws {UnsetVariableError} When a variable is not set in `env`.
   * @throws {TypeError} When `card` is not this registry's own, as `get()` returns it.
   */
  expand(
    card: ModelCard,
    env: Readonly<Record<string, string | undefined>>,
  ): ModelCard {
    const read = this.#cards.get(card.name);
    if (read === undefined) throw this.#unknown(card.name);
    if (read.card !== card) {
      // An expanded card's `${` may come from `$${`: expanding it again would be wrong.
      throw new TypeError(
        `Cannot expand card '${card.name}': not the card this registry holds (expected the card get() or resolve() returns, unexpanded)`,
      );
    }
    return expandCard(read, env);
  }

  /** The cards in catalogue (file) order. */
  *[Symbol.iterator](): IterableIterator<ModelCard> {
    for (const read of this.#cards.values()) yield read.card;
  }

  #unknown(name: string): KeyError {
    return new KeyError(name, this.#cards.keys(), {
      catalogue: this.file,
      shipped: this.#shipped,
    });
  }
}

async function readFileText(
  path: string | URL,
  file: string,
  signal: AbortSignal | undefined,
): Promise<string> {
  const read = await readFileCapped(path, MAX_BYTES, signal);
  if ("not" in read) {
    throw new CatalogueError(
      file,
      `it is ${read.not} (expected a regular file holding the catalogue's YAML, or an http:, https: or file: URL)`,
    );
  }
  if (read.text === undefined) throw tooLarge(file, read.size);
  return read.text;
}

function tooLarge(file: string, size?: number): CatalogueError {
  const bytes = size === undefined ? "" : `${size} bytes, `;
  return new CatalogueError(
    file,
    `it holds ${bytes}more than 16 MiB (expected a catalogue of at most 16 MiB)`,
  );
}

/** The caller's reason, when it is an `Error` of its own, is the line's detail. */
function stopped(file: string, reason: unknown): CatalogueError {
  const message = reason instanceof Error ? reason.message : String(reason);
  const own = reason instanceof Error && !(reason instanceof DOMException);
  const detail = own
    ? message
    : `the load was stopped before the catalogue was read (${message})`;
  return new CatalogueError(file, detail, { cause: reason });
}

/** A server that never answers, stops half-way, or never ends must not hang or grow a start or a reload. */
async function fetchText(
  url: URL,
  file: string,
  timeout: number,
  stop: AbortSignal | undefined,
): Promise<string> {
  const deadline = abortAfter(timeout, stop);
  try {
    const response = await fetch(url, { signal: deadline.signal });
    const length = Number(response.headers.get("content-length") ?? NaN);
    if (!response.ok || length > MAX_BYTES) {
      await response.body?.cancel();
      const status = `${response.status} ${response.statusText}`.trim();
      throw response.ok ? tooLarge(file, length) : new CatalogueError(
        file,
        `the server answered ${status} (expected 200 with the catalogue's YAML)`,
      );
    }
    // The fetch's signal ends the body's read too.
    const text = response.body
      ? await readCapped(response.body, MAX_BYTES)
      : "";
    if (text === undefined) throw tooLarge(file);
    return text;
  } catch (error) {
    if (stop?.aborted || error instanceof CatalogueError) throw error;
    if (deadline.signal.aborted) {
      const within = `within ${timeout / 1000} s`;
      throw new CatalogueError(
        file,
        `no complete answer ${within} (expected the server to send the catalogue ${within})`,
        { cause: error },
      );
    }
    // Deno's "fetch failed" says what went wrong only in its cause.
    const cause = error instanceof Error && error.cause instanceof Error
      ? error.cause
      : error;
    const reason = (cause instanceof Error ? cause.message : String(cause))
      .replace(
        /^(?:error sending request for url \([^)]*\): )?(?:client error \(Connect\): )?(?:Fetch failed: )?/,
        "",
      );
    throw new CatalogueError(
      file,
      `cannot fetch it: ${reason} (expected a reachable HTTP server serving the catalogue at that URL)`,
      { cause: error },
    );
  } finally {
    deadline.clear();
  }
}

function displayName(url: URL): string {
  if (url.protocol !== "file:") return url.href;
  const path = decodeURIComponent(url.pathname);
  return /^\/[A-Za-z]:\//.test(path) ? path.slice(1) : path;
}
