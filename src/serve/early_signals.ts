/**
 * The program's signals from its first instruction (`mod.ts` imports this
 * module first), until `main` takes them over: otherwise a SIGHUP or SIGTERM
 * during start-up would end the process by its default action (exit 129 or
 * 143, no line), maybe mid-reaping. No imports: nothing evaluates before it.
 *
 * @module
 */

/** `mod.ts`: only the program it starts listens this early; an embedder owns its signals. */
const PROGRAM = new URL("../../mod.ts", import.meta.url).href;

/**
 * SIGTERM and SIGINT abort {@linkcode EarlySignals.signal}; a SIGHUP is kept
 * until {@linkcode EarlySignals.handOver} replays it once.
 */
export class EarlySignals implements Disposable {
  readonly #controller = new AbortController();
  readonly #listeners: [Deno.Signal, () => void][] = [];
  #hangups = 0;
  #handedOver = false;
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

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** The launcher answers SIGHUP from now on; one that came before is replayed once. */
  handOver(reload: () => void): void {
    this.#handedOver = true;
    if (this.#hangups > 0) reload();
  }

  #on(name: Deno.Signal, listener: () => void): void {
    Deno.addSignalListener(name, listener);
    this.#listeners.push([name, listener]);
  }

  [Symbol.dispose](): void {
    for (const [name, listener] of this.#listeners.splice(0)) {
      Deno.removeSignalListener(name, listener);
    }
    if (held === this) held = undefined;
  }
}

let held: EarlySignals | undefined;

/** The program's early signal listeners, installed at the first call. */
export function holdEarlySignals(): EarlySignals {
  return held ??= new EarlySignals();
}

// `deno run jsr:@mymodel/serve` may name the package rather than its file.
if (
  Deno.mainModule === PROGRAM ||
  /^jsr:\/?@mymodel\/serve(@[^/]*)?\/?$/.test(Deno.mainModule)
) holdEarlySignals();
