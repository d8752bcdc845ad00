/**
 * {@linkcode loadInWorker}: `Registry.load` in a Worker, so that the YAML
 * parse (npm:yaml parses synchronously: about half a second for 5,000 cards)
 * runs off the event loop that serves the management API. Only a reload uses
 * it: a start and a dry run serve no request while they read the catalogue.
 *
 * @module
 */
import { log } from "../common/log.ts";
import { oneLine } from "../common/one_line.ts";
import { DEFAULT_CATALOGUE, type LoadOptions, Registry } from "./registry.ts";
import {
  type LoadReply,
  type LoadRequest,
  revivedError,
} from "./load_message.ts";

const WORKER = new URL("./catalogue_worker.ts", import.meta.url);

/** Why no worker can run in this process, once found: later loads go direct without a try. */
let unavailable: string | undefined;

/** A worker that did not start or did not answer; the load goes direct. */
class WorkerFailed extends Error {}

/**
 * Loads a catalogue as `Registry.load` does, in a Worker that ends after the
 * one load; a refusal comes back as the error the load threw (same class,
 * message and fields). Where no worker can run (no read permission for the
 * package's modules, a binary compiled without the worker module), the
 * catalogue is loaded directly, with one warning line, once a process.
 *
 * @param source As `Registry.load`'s.
 * @param options As `Registry.load`'s.
 * @returns The registry.
 * @throws {CatalogueError} As `Registry.load`.
 *
 * @example
 * ```ts ignore
 * const registry = await loadInWorker("/srv/mymodel/catalogue.yaml");
 * ```
 */
export async function loadInWorker(
  source: string | URL = DEFAULT_CATALOGUE,
  options: LoadOptions = {},
): Promise<Registry> {
  if (unavailable === undefined) {
    unavailable = blocked();
    try {
      if (unavailable === undefined) {
        const reply = await ask({
          source: String(source),
          url: source instanceof URL,
          options,
        });
        if (reply.ok) return Registry.fromParsed(reply.parsed);
        throw revivedError(reply.error);
      }
    } catch (error) {
      if (!(error instanceof WorkerFailed)) throw error;
      unavailable = error.message;
    }
    log.warn(
      `catalogue worker unavailable (${unavailable}): reloads read the catalogue on the management API's event loop, which waits for the parse`,
    );
  }
  return await Registry.load(source, options);
}

/** One request to a fresh worker, and its one reply; the worker is gone after. */
async function ask(request: LoadRequest): Promise<LoadReply> {
  let worker: Worker;
  try {
    worker = new Worker(WORKER, { type: "module" });
  } catch (error) {
    throw new WorkerFailed(oneLine(error));
  }
  try {
    return await new Promise<LoadReply>((resolve, reject) => {
      worker.onmessage = (event: MessageEvent<LoadReply>) =>
        resolve(event.data);
      worker.onerror = (event) => {
        event.preventDefault();
        reject(new WorkerFailed(oneLine(event.message)));
      };
      worker.onmessageerror = () =>
        reject(new WorkerFailed("its answer could not be read"));
      worker.postMessage(request);
    });
  } finally {
    worker.terminate();
  }
}

/**
 * Why a worker cannot load here, checked before one is started: Deno prints a
 * worker's failed module load on stderr whatever the handler does, and a
 * worker reads its modules under the process's `--allow-read`. A compiled
 * binary reads its embedded modules without that permission: it is tried.
 */
function blocked(): string | undefined {
  if (
    WORKER.protocol !== "file:" || WORKER.pathname.includes("/deno-compile-")
  ) {
    return undefined;
  }
  const modules = new URL("../", WORKER);
  const { state } = Deno.permissions.querySync({ name: "read", path: modules });
  return state === "granted"
    ? undefined
    : `no read permission for ${
      decodeURIComponent(modules.pathname)
    } (expected --allow-read to include the launcher's modules)`;
}
