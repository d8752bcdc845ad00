/**
 * The signals a running launcher answers: SIGTERM and SIGINT shut it down (a
 * second one more than half a second later SIGKILLs every engine), SIGHUP
 * reloads and never ends the process. An embedding program that handles its
 * own signals (`handleSignals: false`) gets none of them.
 *
 * @module
 */
import { log } from "../common/log.ts";

/** Signals closer together than this are one signal delivered twice. */
const DUPLICATE_SIGNAL_MS = 500;

/**
 * The launcher's signal listeners, removed on dispose.
 *
 * @example
 * ```ts ignore
 * using signals = new LauncherSignals(true);
 * signals.onHangup(() => void serve.reload());
 * signals.onShutdown(() => stop(), () => killEngines());
 * ```
 */
export class LauncherSignals implements Disposable {
  readonly #enabled: boolean;
  readonly #listeners: [Deno.Signal, () => void][] = [];

  /** @param enabled False: listen to nothing (the embedding program does). */
  constructor(enabled: boolean) {
    this.#enabled = enabled;
  }

  /**
   * SIGHUP reloads: installed from the first moment, so that a hangup never
   * ends the process (its default action would).
   *
   * @param reload Starts a reload.
   */
  onHangup(reload: () => void): void {
    this.#on("SIGHUP", reload);
  }

  /**
   * SIGTERM and SIGINT shut down; a second signal (an impatient Ctrl-C) skips
   * the grace period. One that arrives at once is the same signal relayed
   * twice (a wrapper such as `deno task` or `timeout` forwarding to the whole
   * group): not a second ask.
   *
   * @param shutdown Starts the shutdown.
   * @param kill SIGKILLs every engine.
   */
  onShutdown(shutdown: () => void, kill: () => void): void {
    let firstAt = 0;
    function handle(): void {
      if (firstAt && Date.now() - firstAt > DUPLICATE_SIGNAL_MS) {
        log.warn("second signal: SIGKILL to every engine");
        kill();
      }
      firstAt ||= Date.now();
      shutdown();
    }
    this.#on("SIGTERM", handle);
    this.#on("SIGINT", handle);
  }

  #on(signal: Deno.Signal, listener: () => void): void {
    if (!this.#enabled) return;
    Deno.addSignalListener(signal, listener);
    this.#listeners.push([signal, listener]);
  }

  /** Removes every listener. */
  [Symbol.dispose](): void {
    for (const [signal, listener] of this.#listeners.splice(0)) {
      Deno.removeSignalListener(signal, listener);
    }
  }
}
