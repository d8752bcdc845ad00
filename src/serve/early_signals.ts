/**
 * The program's signals from its first instruction, before the launcher
 * exists: `mod.ts` imports this module first, so its listeners are installed
 * as soon as the module graph has loaded (a dependency evaluates before the
 * module importing it), and `main` takes them over. Without them a SIGHUP or
 * SIGTERM while the modules load or the start-up checks run would end the
 * process by the signal's default action (exit 129 or 143, no line), in the
 * middle of reaping a killed launcher's engine. No imports: nothing to
 * evaluate before it.
 *
 * @module
 */

/** `mod.ts`: only the program it starts listens this early; an embedder owns its signals. */
const PROGRAM = new URL("../../mod.ts", import.meta.url).href;

/**
 * SIGTERM and SIGINT abort {@linkcode EarlySignals.signal}; a SIGHUP is kept
 * until {@linkcode EarlySignals.handOver} replays it once (the launcher's own
 * listener answers the later ones).
 *
 * @example
 * ```ts ignore
 * using early = holdEarlySignals();
 * const serve = new Semioserve({ models, signal: early.signal });
 * const running = serve.run();
 * early.handOver(() => void serve.reload());
 * ```
 */
export class EarlySignals implements Disposable {
  readonly #controller = new AbortController();
  readonly #listeners: [Deno.Signal, () => void][] = [];
  #hangups = 0;
  #handedOver = false;
  /** The first SIGTERM or SIGINT, once one arrived. */
  received: "SIGTERM" | "SIGINT" | undefined;

  constructor() {
    for (const name of ["SIGTERM", "SIGINT"] as const) {
      this.#on(name, () => {
        this.received ??= name;
        this.#controller.abort();
      });
    }
    this.#on("SIGHUP", () => {
      if (!this.#handedOver) this.#hangups++;
    });
  }

  /** Aborted by the first SIGTERM or SIGINT. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /**
   * The launcher answers SIGHUP from now on: one that arrived before is
   * replayed once, through `reload`.
   *
   * @param reload Asks the launcher for a reload.
   */
  handOver(reload: () => void): void {
    this.#handedOver = true;
    if (this.#hangups > 0) reload();
  }

  #on(name: Deno.Signal, listener: () => void): void {
    Deno.addSignalListener(name, listener);
    this.#listeners.push([name, listener]);
  }

  /** Removes every listener; the next {@linkcode holdEarlySignals} installs new ones. */
  [Symbol.dispose](): void {
    for (const [name, listener] of this.#listeners.splice(0)) {
      Deno.removeSignalListener(name, listener);
    }
    if (held === this) held = undefined;
  }
}

let held: EarlySignals | undefined;

/**
 * The program's early signal listeners, installed at the first call.
 *
 * @returns The one holder until it is disposed.
 */
export function holdEarlySignals(): EarlySignals {
  return held ??= new EarlySignals();
}

// `deno run jsr:@mymodel/serve` may name the package rather than its file.
if (
  Deno.mainModule === PROGRAM ||
  /^jsr:\/?@mymodel\/serve(@[^/]*)?\/?$/.test(Deno.mainModule)
) holdEarlySignals();
