/**
 * The watchdog: one small detached `sh` per launcher that stops the engines if
 * the launcher dies without stopping them (SIGKILL, the OOM killer).
 *
 * The launcher writes `add <pgid>` and `del <pgid>` lines into the watchdog's
 * stdin; nothing else holds that pipe's write end (Deno opens every other file
 * close-on-exec, so engines do not inherit it). When the launcher dies, the
 * kernel closes the pipe, `read` sees end-of-file, and the watchdog sends
 * SIGTERM to every group still listed, waits the grace period (leaving as soon
 * as they are gone), then sends SIGKILL. A normal shutdown stops the engines
 * first and then closes the pipe with no group listed, so the watchdog just
 * exits.
 *
 * @module
 */
import { log } from "../common/log.ts";
import { within } from "../common/sleep.ts";
import { signalGroup } from "../engines/process_group.ts";

/** A watchdog that does not exit this long after its pipe closed is stuck (stopped): kill it. */
const EXIT_WAIT_MS = 2_000;

/** POSIX sh (dash's `kill` wants `-s SIG -- -pgid` for groups). */
const SCRIPT = `trap '' INT TERM HUP
ticks=$1
groups=""
while read -r op id; do
  case "$op" in
    add) groups="$groups $id" ;;
    del) rest=""; for g in $groups; do [ "$g" = "$id" ] || rest="$rest $g"; done; groups=$rest ;;
  esac
done
[ -n "$groups" ] || exit 0
for g in $groups; do kill -s TERM -- "-$g" 2>/dev/null; done
i=0
while [ "$i" -lt "$ticks" ]; do
  alive=""
  for g in $groups; do kill -s 0 -- "-$g" 2>/dev/null && alive="$alive $g"; done
  groups=$alive
  [ -n "$groups" ] || exit 0
  sleep 0.1
  i=$((i + 1))
done
for g in $groups; do kill -s KILL -- "-$g" 2>/dev/null; done
exit 0
`;

const encoder = new TextEncoder();

/**
 * A launcher's watchdog process.
 */
export class Watchdog {
  readonly #child: Deno.ChildProcess;
  readonly #writer: WritableStreamDefaultWriter<Uint8Array>;
  #broken = false;
  #closed: Promise<void> | undefined;

  private constructor(child: Deno.ChildProcess) {
    this.#child = child;
    this.#writer = child.stdin.getWriter();
  }

  /**
   * Spawns the watchdog. Never throws: without it (no `sh`, or not allowed)
   * the launcher warns and relies on its records instead.
   *
   * @param graceMs Time the engines get between SIGTERM and SIGKILL.
   */
  static start(graceMs: number): Watchdog | undefined {
    try {
      const child = new Deno.Command("sh", {
        args: ["-c", SCRIPT, "watchdog", String(Math.ceil(graceMs / 100))],
        stdin: "piped",
        stdout: "null",
        stderr: "null",
        // Its own session: a Ctrl-C to the launcher's terminal must not end it.
        detached: true,
      }).spawn();
      return new Watchdog(child);
    } catch (error) {
      log.warn(
        `cannot start the watchdog (sh): ${
          (error as Error).message
        }; a launcher killed outright would leave its engines running until the next start reaps them`,
      );
      return undefined;
    }
  }

  /** Watches a process group from now on. */
  add(pgid: number): void {
    this.#send(`add ${pgid}\n`);
  }

  /** Stops watching a group (its engine is gone). */
  remove(pgid: number): void {
    this.#send(`del ${pgid}\n`);
  }

  #send(line: string): void {
    if (this.#broken || this.#closed) return;
    this.#writer.write(encoder.encode(line)).catch((error) => {
      if (this.#broken) return;
      this.#broken = true;
      log.warn(
        `the watchdog (pid ${this.#child.pid}) is gone: ${
          (error as Error).message
        }; engine records still let the next start clean up`,
      );
    });
  }

  /** Closes the pipe and waits for the watchdog to exit (at once when nothing is watched). */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      await this.#writer.close().catch(() => {});
      if ((await within(this.#child.status, EXIT_WAIT_MS)) === undefined) {
        signalGroup(this.#child.pid, "SIGKILL");
        await this.#child.status;
      }
    })();
    return this.#closed;
  }
}
