/**
 * The signals a running launcher answers (none with `handleSignals: false`).
 *
 * @module
 */
import { log } from "../common/log.ts";

/** Signals closer together than this are one signal delivered twice. */
const DUPLICATE_SIGNAL_MS = 500;

export class LauncherSignals implements Disposable {
  readonly #enabled: boolean;
  readonly #listeners: [Deno.Signal, () => void][] = [];

  constructor(enabled: boolean) {
    this.#enabled = enabled;
  }

  /** SIGHUP reloads, from the first moment: its default action would end the process. */
  onHangup(reload: () => void): void {
    this.#on("SIGHUP", reload);
  }

  /**
   * SIGTERM and SIGINT shut down; a second one cuts the drains short (`hurry`
   * true: some engine was draining), else skips the grace period; unless it
   * comes at once: a wrapper (`deno task`, `timeout`) relaying to the whole
   * group.
   */
  onShutdown(
    shutdown: () => void,
    kill: () => void,
    hurry: () => boolean = () => false,
  ): void {
    let firstAt = 0;
    let count = 0;
    function handle(): void {
      if (firstAt && Date.now() - firstAt > DUPLICATE_SIGNAL_MS) {
        const nth = ++count === 1 ? "second" : "another";
        if (hurry()) {
          log.warn(
            `${nth} signal: drains cut short, SIGTERM to every engine (another signal: SIGKILL)`,
          );
        } else {
          log.warn(`${nth} signal: SIGKILL to every engine`);
          kill();
        }
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

  [Symbol.dispose](): void {
    for (const [signal, listener] of this.#listeners.splice(0)) {
      Deno.removeSignalListener(signal, listener);
    }
  }
}
