// The watchdog: one small detached `sh` per launcher that stops the engines if
// the launcher dies without stopping them (SIGKILL, the OOM killer). It reads
// `add <pgid>`/`del <pgid>` lines from a pipe only the launcher holds (Deno
// opens every other file close-on-exec); when the launcher dies, the kernel
// closes it and the watchdog sends SIGTERM, the grace, then SIGKILL to every
// group still listed.
import { log } from "../common/log.ts";
import { within } from "../common/sleep.ts";
import { signalGroup } from "../engines/process_group.ts";

// A watchdog that does not exit this long after its pipe closed is stuck: killed.
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

export class Watchdog {
  readonly #child: Deno.ChildProcess;
  readonly #writer: WritableStreamDefaultWriter<Uint8Array>;
  #off = false; // closed, or its pipe broke

  private constructor(child: Deno.ChildProcess) {
    this.#child = child;
    this.#writer = child.stdin.getWriter();
  }

  /** Never throws: without it the launcher warns and relies on its records. */
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
      const why = (error as Error).message;
      log.warn(
        `cannot start the watchdog (sh): ${why}; a launcher killed outright would leave its engines running until the next start reaps them`,
      );
      return undefined;
    }
  }

  add(pgid: number): void {
    this.#send(`add ${pgid}\n`);
  }

  remove(pgid: number): void {
    this.#send(`del ${pgid}\n`);
  }

  #send(line: string): void {
    if (this.#off) return;
    this.#writer.write(new TextEncoder().encode(line)).catch((error) => {
      if (this.#off) return;
      this.#off = true;
      const why = (error as Error).message;
      log.warn(
        `the watchdog (pid ${this.#child.pid}) is gone: ${why}; engine records still let the next start clean up`,
      );
    });
  }

  async close(): Promise<void> {
    this.#off = true;
    await this.#writer.close().catch(() => {});
    if ((await within(this.#child.status, EXIT_WAIT_MS)) === undefined) {
      signalGroup(this.#child.pid, "SIGKILL");
      await this.#child.status;
    }
  }
}
