// One signal to an engine's group reaches every descendant that stayed in it
// (vLLM's EngineCore and workers do). `Deno.kill` needs unscoped
// `--allow-run`; under a narrowed list the `kill` program is used.
import { sleep } from "../common/sleep.ts";
import { attempt } from "./proc.ts";

let canKillDirectly: boolean | undefined;

/** false when the group has no process left. */
export function signalGroup(pgid: number, signal: Deno.Signal): boolean {
  if (!(pgid > 1)) return false; // never signal our own group (0) or init's (1)
  canKillDirectly ??=
    Deno.permissions.querySync({ name: "run" }).state === "granted";
  if (canKillDirectly) {
    try {
      Deno.kill(-pgid, signal);
      return true;
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) return false;
      throw error;
    }
  }
  const { code } = new Deno.Command("kill", {
    args: [`-${signal.slice(3)}`, "--", `-${pgid}`],
    stdout: "null",
    stderr: "null",
  }).outputSync();
  return code === 0;
}

/** SIGTERM (again after `againMs`, within the grace), then SIGKILL after `graceMs`; resolves once nothing is left, or 5 s after SIGKILL. */
export async function stopGroup(
  pgid: number,
  graceMs: number,
  how: {
    alive?: (pgid: number) => boolean;
    onKill?: () => void;
    againMs?: number | undefined;
  } = {},
): Promise<void> {
  // SIGCONT is harmless to a running process.
  const alive = how.alive ?? ((group) => signalGroup(group, "SIGCONT"));
  const gone = async (ms: number) => {
    const deadline = performance.now() + ms; // monotonic: a wall step ends no wait
    while (alive(pgid)) {
      if (performance.now() >= deadline) return false;
      await sleep(50);
    }
    return true;
  };
  if (!signalGroup(pgid, "SIGTERM")) return;
  const again = Math.min(how.againMs ?? graceMs, graceMs);
  if (await gone(again)) return;
  if (again < graceMs) {
    if (!signalGroup(pgid, "SIGTERM") || await gone(graceMs - again)) return;
  }
  how.onKill?.();
  signalGroup(pgid, "SIGKILL");
  await gone(5_000);
}

// Groups that must not outlive this process, even when it exits abruptly.
const live = new Set<number>();

export function track(pgid: number): void {
  live.add(pgid);
  // Added once: a listener already added is not added again.
  // Last resort on Deno.exit() or a crash: nothing can be awaited there, so SIGKILL.
  globalThis.addEventListener("unload", killAllTracked);
  // An uncaught error ends the process without "unload"; unless a listener
  // before us handled it, the process is about to die.
  globalThis.addEventListener("error", killUnlessHandled);
  globalThis.addEventListener("unhandledrejection", killUnlessHandled);
}

export function forget(pgid: number): void {
  live.delete(pgid);
}

function killUnlessHandled(event: Event): void {
  if (!event.defaultPrevented) killAllTracked();
}

function killAllTracked(): void {
  for (const pgid of live) attempt(() => signalGroup(pgid, "SIGKILL"), false);
  live.clear();
}
