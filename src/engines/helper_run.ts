// One short run of a helper program (`nvidia-smi`, an engine's `--help`): in
// its own process group, so that a timeout kills whatever it started too.
import { signalGroup } from "./process_group.ts";
import { attempt } from "./proc.ts";
import { within } from "../common/sleep.ts";

export type HelperRun = {
  readonly status: Deno.CommandStatus;
  readonly stdout: string;
  readonly stderr: string;
  /** Standard output passed `cap` bytes; only the first `cap` are kept. */
  readonly truncated: boolean;
} | "timeout";

// After a kill, how long to wait for the process and its pipes.
const REAP_MS = 1000;

/** @throws The spawn's error (`Deno.errors.NotFound`, `NotCapable` …); nothing after the spawn. */
export async function runHelper(
  program: string,
  args: readonly string[],
  options: {
    readonly env?: Record<string, string> | undefined;
    readonly timeoutMs: number;
    readonly cap?: number;
    /** Ends the run as its timeout does (the launcher's stop). */
    readonly signal?: AbortSignal | undefined;
  },
): Promise<HelperRun> {
  const child = new Deno.Command(program, {
    args: [...args],
    ...(options.env === undefined ? {} : { env: options.env }),
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    detached: true,
  }).spawn();
  const cap = options.cap ?? Infinity;
  const out = drain(child.stdout, cap);
  const err = drain(child.stderr, cap);
  const all = Promise.all([child.status, out.text, err.text]);
  const stopped = Promise.withResolvers<undefined>();
  const stop = () => stopped.resolve(undefined);
  options.signal?.addEventListener("abort", stop, { once: true });
  if (options.signal?.aborted) stop();
  const race = Promise.race([all, stopped.promise]);
  const done = await within(race, options.timeoutMs);
  options.signal?.removeEventListener("abort", stop);
  if (done === undefined) {
    attempt(() => signalGroup(child.pid, "SIGKILL"), false); // gone already
    if (await within(all, REAP_MS) === undefined) {
      // Stuck in the kernel (a hung driver): stop reading and move on.
      out.cancel();
      err.cancel();
      child.unref();
    }
    return "timeout";
  }
  const [status, { text: stdout, truncated }, { text: stderr }] = done;
  return { status, stdout, stderr, truncated };
}

function drain(
  stream: ReadableStream<Uint8Array>,
  cap: number,
): { text: Promise<{ text: string; truncated: boolean }>; cancel(): void } {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let kept = 0;
  let truncated = false;
  const read = async () => {
    try {
      for (let r = await reader.read(); !r.done; r = await reader.read()) {
        if (kept + r.value.length > cap) truncated = true;
        const part = r.value.subarray(0, Math.max(0, cap - kept));
        text += decoder.decode(part, { stream: true });
        kept += part.length;
      }
    } catch {
      // Cancelled or broken: what was read is all there is.
    } finally {
      reader.releaseLock();
    }
    return { text: text + decoder.decode(), truncated };
  };
  return { text: read(), cancel: () => void reader.cancel().catch(() => {}) };
}
