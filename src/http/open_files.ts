/**
 * The open-files limit: the soft one raised to the hard one, as Go and
 * Node.js do. Deno has no getrlimit/setrlimit (it raises the limit itself at
 * start in 2.x); util-linux's `prlimit` needs only `--allow-run=prlimit`,
 * where FFI would need `--allow-ffi`, which is all permissions.
 *
 * @module
 */
import { log } from "../common/log.ts";

/** `Infinity` when unlimited. */
interface OpenFilesLimit {
  soft: number;
  hard: number;
}

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

async function readOpenFilesLimit(): Promise<OpenFilesLimit> {
  const out = await prlimit(
    ["--nofile", "--raw", "--noheadings", "--output=SOFT,HARD"],
    "read the open-files limit",
  );
  const limits = out.split(/\s+/).map((n) =>
    n === "unlimited" ? Infinity : Number(n)
  );
  const [soft, hard] = limits;
  if (
    soft === undefined || hard === undefined || limits.length > 2 ||
    !limits.every((n) => n === Infinity || (Number.isSafeInteger(n) && n >= 0))
  ) {
    throw new Error(
      `Cannot read the open-files limit: prlimit printed '${out}' (expected two numbers)`,
    );
  }
  return { soft, hard };
}

/** Before engines start, which inherit it; the soft limit in force, or undefined when unknown. */
export async function raiseAndReportOpenFiles(): Promise<number | undefined> {
  try {
    const before = await readOpenFilesLimit();
    let after = before;
    if (before.soft < before.hard) {
      const hard = before.hard === Infinity ? "unlimited" : String(before.hard);
      await prlimit([`--nofile=${hard}:${hard}`], "raise the open-files limit");
      after = await readOpenFilesLimit();
    }
    log.info(
      `open files: limit ${after.soft}${
        before.soft < after.soft ? ` (raised from ${before.soft})` : ""
      }, hard limit ${after.hard}`,
    );
    return after.soft;
  } catch (error) {
    log.warn(
      `${(error as Error).message}; the connection limit is not capped to it`,
    );
    return undefined;
  }
}
