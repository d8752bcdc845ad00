// The open-files limit, which caps the connection limit. Deno 2.x raises the
// soft limit to the hard one when it starts (as Go and Node.js do) but cannot
// read it: util-linux's `prlimit` needs only `--allow-run=prlimit`, where FFI
// would need `--allow-ffi`, which is all permissions.
import { log } from "../common/log.ts";

const decoder = new TextDecoder();
const WHAT = "Cannot read the open-files limit: prlimit";
const FLAGS = ["--nofile", "--raw", "--noheadings", "--output=SOFT,HARD"];

/** Soft and hard; `Infinity` when unlimited. */
async function readOpenFilesLimit(): Promise<[number, number]> {
  let output: Deno.CommandOutput;
  try {
    output = await new Deno.Command("prlimit", {
      args: ["--pid", String(Deno.pid), ...FLAGS],
      stdin: "null",
    }).output();
  } catch (cause) {
    const hint = cause instanceof Deno.errors.NotCapable
      ? " (allow it with --allow-run=prlimit)"
      : cause instanceof Deno.errors.NotFound
      ? " (install util-linux)"
      : "";
    throw new Error(`${WHAT}: ${(cause as Error).message}${hint}`, { cause });
  }
  if (!output.success) {
    const err = decoder.decode(output.stderr).trim();
    throw new Error(`${WHAT} exited with code ${output.code}: ${err}`);
  }
  const out = decoder.decode(output.stdout).trim();
  const limits = out.split(/\s+/).map((n) =>
    n === "unlimited" ? Infinity : Number(n)
  );
  if (
    limits.length !== 2 ||
    !limits.every((n) => n === Infinity || (Number.isSafeInteger(n) && n >= 0))
  ) {
    throw new Error(`${WHAT} printed '${out}' (expected two numbers)`);
  }
  return limits as [number, number];
}
/** Logs the limit; the soft one, or undefined when unknown. */
export async function reportOpenFiles(): Promise<number | undefined> {
  try {
    const [soft, hard] = await readOpenFilesLimit();
    log.info(`open files: limit ${soft}, hard limit ${hard}`);
    return soft;
  } catch (error) {
    log.warn(
      `${(error as Error).message}; the connection limit is not capped to it`,
    );
    return undefined;
  }
}
