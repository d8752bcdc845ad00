// The open-files limit, which caps the connection limit. Deno 2.x raises the
// soft limit to the hard one when it starts (as Go and Node.js do) but cannot
// read it: util-linux's `prlimit` needs only `--allow-run=prlimit`, where FFI
// would need `--allow-ffi`, which is all permissions.
import { log } from "../common/log.ts";

const decoder = new TextDecoder();
const FLAGS = ["--nofile", "--raw", "--noheadings", "--output=SOFT,HARD"];

/** Logs the soft and hard limits; the soft one, or undefined when unknown. */
export async function reportOpenFiles(): Promise<number | undefined> {
  let problem: string;
  try {
    const output = await new Deno.Command("prlimit", {
      args: ["--pid", String(Deno.pid), ...FLAGS],
      stdin: "null",
    }).output();
    const out = decoder.decode(output.stdout).trim();
    const limits = out.split(/\s+/).map((n) =>
      n === "unlimited" ? Infinity : Number(n)
    );
    const [soft, hard] = limits;
    if (!output.success) {
      const err = decoder.decode(output.stderr).trim();
      problem = ` exited with code ${output.code}: ${err}`;
    } else if (
      limits.length === 2 &&
      limits.every((n) => n === Infinity || (Number.isSafeInteger(n) && n >= 0))
    ) {
      log.info(`open files: limit ${soft}, hard limit ${hard}`);
      return soft;
    } else {
      problem = ` printed '${out}' (expected two numbers)`;
    }
  } catch (cause) {
    const hint = cause instanceof Deno.errors.NotCapable
      ? " (allow it with --allow-run=prlimit)"
      : cause instanceof Deno.errors.NotFound
      ? " (install util-linux)"
      : "";
    problem = `: ${(cause as Error).message}${hint}`;
  }
  log.warn(
    `Cannot read the open-files limit: prlimit${problem}; the connection limit is not capped to it`,
  );
  return undefined;
}
