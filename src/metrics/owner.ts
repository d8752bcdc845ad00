/**
 * Who wrote a metrics file, and the removal of files whose writer is gone.
 * Every file opens with a comment naming its launcher's pid and start time
 * (field 22 of `/proc/<pid>/stat`); a launcher killed outright cannot remove
 * its file, so the next launcher on the same directory removes the files of
 * launchers that no longer run, and leaves those of live ones alone. The
 * start time keeps a reused pid from passing for the launcher.
 *
 * @module
 */
import { log } from "../common/log.ts";
import { processStartTimes } from "../supervision/records.ts";

/** The launcher process that writes a metrics file. */
export interface MetricsOwner {
  /** Its pid. */
  pid: number;
  /** Its start time from `/proc/<pid>/stat` (clock ticks since boot, as text). */
  startTime: string;
}

const OWNER = /^# mymodel_serve owner pid=(\d+) start_time=(\d+)$/m;
const FILE = /^mymodel_serve_(\d+)\.prom$/;

/** This process as a metrics file's owner; undefined when `/proc` cannot tell its start time. */
export function thisOwner(): MetricsOwner | undefined {
  const startTime = processStartTimes([Deno.pid]).get(Deno.pid);
  return startTime ? { pid: Deno.pid, startTime } : undefined;
}

/**
 * The comment line naming a file's owner. Prometheus' text format skips
 * comments other than `# HELP` and `# TYPE`, so it adds no series.
 *
 * @param owner The launcher writing the file.
 * @returns One line, with its line feed.
 *
 * @example
 * ```ts
 * import { ownerComment } from "./owner.ts";
 * const line = ownerComment({ pid: 42, startTime: "1234" });
 * if (line !== "# mymodel_serve owner pid=42 start_time=1234\n") throw new Error(line);
 * ```
 */
export function ownerComment(owner: MetricsOwner): string {
  return `# mymodel_serve owner pid=${owner.pid} start_time=${owner.startTime}\n`;
}

/** The owner a metrics file's text names, or undefined when it names none. */
export function ownerOf(text: string): MetricsOwner | undefined {
  const match = OWNER.exec(text);
  return match ? { pid: Number(match[1]), startTime: match[2]! } : undefined;
}

/**
 * Removes the metrics files in `<directory>/metrics/` whose owner no longer
 * runs (no such pid, or the pid now has another start time), logging one line
 * for each. Left alone: the file of `port` (this launcher's), files of live
 * launchers, files of this process, and files naming no owner.
 * `port` is this launcher's, `self` this launcher.
 */
export async function removeDeadOwnersFiles(
  directory: string,
  port: number,
  self: MetricsOwner,
): Promise<void> {
  const found: { path: string; owner: MetricsOwner }[] = [];
  try {
    for await (const entry of Deno.readDir(`${directory}/metrics`)) {
      const match = FILE.exec(entry.name);
      if (!entry.isFile || !match || Number(match[1]) === port) continue;
      const path = `${directory}/metrics/${entry.name}`;
      const owner = ownerOf(await Deno.readTextFile(path).catch(() => ""));
      if (owner) found.push({ path, owner });
    }
  } catch {
    return; // no metrics/ to read: the write that follows says so
  }
  const alive = processStartTimes(found.map(({ owner }) => owner.pid));
  for (const { path, owner } of found) {
    const same = owner.pid === self.pid && owner.startTime === self.startTime;
    if (same || alive.get(owner.pid) === owner.startTime) continue;
    try {
      await Deno.remove(path);
      log.info(
        `removed metrics file ${path}: its launcher (pid ${owner.pid}) is gone`,
      );
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) continue; // another launcher removed it
      log.warn(
        `Cannot remove metrics file ${path} of launcher pid ${owner.pid} (gone): ${
          (error as Error).message
        }`,
      );
    }
  }
}
