// The program's signals. From its first instruction (`mod.ts` imports this
// module first) until `main` hands them to the launcher: otherwise a SIGHUP or
// SIGTERM during start-up would end the process by its default action (exit
// 129 or 143, no line), maybe mid-reaping. No imports: nothing evaluates
// before it. Then those a running launcher answers (none with
// `handleSignals: false`).

/** Signals closer together than this are one signal delivered twice. */
const DUPLICATE_SIGNAL_MS = 500;

/** Signal listeners, each removed on dispose; none added while not `enabled`. */
export class SignalListeners implements Disposable {
  readonly #enabled: boolean;
  readonly #added: [Deno.Signal, () => void][] = [];

  constructor(enabled = true) {
    this.#enabled = enabled;
  }

  on(names: readonly Deno.Signal[], listener: () => void): void {
    if (!this.#enabled) return;
    for (const name of names) {
      Deno.addSignalListener(name, listener);
      this.#added.push([name, listener]);
    }
  }

  [Symbol.dispose](): void {
    for (const [name, listener] of this.#added.splice(0)) {
      Deno.removeSignalListener(name, listener);
    }
  }
}

/** `mod.ts`: only the program it starts listens this early; an embedder owns its signals. */
const PROGRAM = new URL("../../mod.ts", import.meta.url).href;

/** SIGTERM and SIGINT abort `signal`; a SIGHUP is kept until `handOver` replays it once. */
export class EarlySignals extends SignalListeners {
  readonly #controller = new AbortController();
  readonly signal: AbortSignal = this.#controller.signal;
  #hangups = 0;
  #handedOver = false;
  received: "SIGTERM" | "SIGINT" | undefined;

  constructor() {
    super();
    for (const name of ["SIGTERM", "SIGINT"] as const) {
      this.on([name], () => {
        this.received ??= name;
        this.#controller.abort();
      });
    }
    this.on(["SIGHUP"], () => {
      if (!this.#handedOver) this.#hangups++;
    });
  }

  /** The launcher answers SIGHUP from now on; one that came before is replayed once. */
  handOver(reload: () => void): void {
    this.#handedOver = true;
    if (this.#hangups > 0) reload();
  }

  override [Symbol.dispose](): void {
    super[Symbol.dispose]();
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

// A second SIGTERM or SIGINT cuts the drains short (`hurry` true), else skips
// the grace period; unless it comes at once: a wrapper (`deno task`,
// `timeout`) relaying to the whole group.
export function onShutdownSignal(
  shutdown: () => void,
  kill: () => void,
  hurry: () => boolean,
  warn: (line: string) => void,
): () => void {
  let firstAt = 0;
  let count = 0;
  return () => {
    if (firstAt && performance.now() - firstAt > DUPLICATE_SIGNAL_MS) {
      const nth = ++count === 1 ? "second" : "another";
      if (hurry()) {
        warn(
          `${nth} signal: drains cut short, SIGTERM to every engine (another signal: SIGKILL)`,
        );
      } else {
        warn(`${nth} signal: SIGKILL to every engine`);
        kill();
      }
    }
    firstAt ||= performance.now();
    shutdown();
  };
}
