/**
 * The open-files limit: the soft one raised to the hard one, as Go and
 * Node.js do. Deno has no getrlimit/setrlimit (it raises the limit itself at
 * start in 2.x); util-linux's `prlimit` needs only `--allow-run=prlimit`,
 * where FFI would need `--allow-ffi`, which is all permissions.
 *
 * @module
 */
import { log } from "../common/log.ts";

const decoder = new TextDecoder();

async function prlimit(args: string[], what: string): Promise<string> {
  let output: Deno.CommandOutput;
  try {
    output = await new Deno.Command("prlimit", {
      args: ["--pid", String(Deno.pid), ...args],
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
  } catch (cause) {
    const hint = cause instanceof Deno.errors.NotCapable
      ? " (allow it with --allow-run=prlimit)"
      : cause instanceof Deno.errors.NotFound
      ? " (install util-linux)"
      : "";
    throw new Error(
      `Cannot ${what}: prlimit: ${(cause as Error).message}${hint}`,
      { cause },
    );
  }
  if (!output.success) {
    throw new Error(
      `Cannot ${what}: prlimit exited with code ${output.code}: ${
        decoder.decode(output.stderr).trim()
      }`,
    );
  }
  return decoder.decode(output.stdout).trim();
}

/** Soft and hard; `Infinity` when unlimited. */
async function readOpenFilesLimit(): Promise<[number, number]> {
  const out = await prlimit(
    ["--nofile", "--raw", "--noheadings", "--output=SOFT,HARD"],
    "read the open-files limit",
  );
  const limits = out.split(/\s+/).map((n) =>
    n === "unlimited" ? Infinity : Number(n)
  );
  if (
    limits.length !== 2 ||
    !limits.every((n) => n === Infinity || (Number.isSafeInteger(n) && n >= 0))
  ) {
    throw new Error(
      `Cannot read the open-files limit: prlimit printed '${out}' (expected two numbers)`,
    );
  }
  return limits as [number, number];
}

/** Before engines start, which inherit it; the soft limit in force, or undefined when unknown. */
export async function raiseAndReportOpenFiles(): Promise<number | undefined> {
  try {
    const [before, hard] = await readOpenFilesLimit();
    let soft = before;
    if (soft < hard) {
      const limit = hard === Infinity ? "unlimited" : String(hard);
      await prlimit(
        [`--nofile=${limit}:${limit}`],
        "raise the open-files limit",
      );
      [soft] = await readOpenFilesLimit();
    }
    log.info(
      `open files: limit ${soft}${
        before < soft ? ` (raised from ${before})` : ""
      }, hard limit ${hard}`,
    );
    return soft;
  } catch (error) {
    log.warn(
      `${(error as Error).message}; the connection limit is not capped to it`,
    );
    return undefined;
  }
}
