// A launcher killed outright cannot remove its metrics file, so the next one
// removes the files whose owner (pid and start time, so that a reused pid does
// not pass for it) no longer runs.
import { log } from "../common/log.ts";
import { processStartTimes } from "../supervision/records.ts";

export interface MetricsOwner {
  pid: number;
  /** Field 22 of `/proc/<pid>/stat`, as text. */
  startTime: string;
}

const OWNER = /^# mymodel_serve owner pid=(\d+) start_time=(\d+)$/m;
const FILE = /^mymodel_serve_(\d+)\.prom$/;
// `writeFileAtomic`'s temporary name: a launcher killed between its write and
// its rename leaves one, which goes with the dead launcher's file.
const TEMPORARY = /^\.mymodel_serve_(\d+)\.prom\.[0-9a-f]+\.tmp$/;
// The owner line is a file's first; a file of any size (a neighbour's, a
// planted one) costs one small read.
const FIRST_LINE_BYTES = 4096;

export function thisOwner(): MetricsOwner | undefined {
  const startTime = processStartTimes([Deno.pid]).get(Deno.pid);
  return startTime ? { pid: Deno.pid, startTime } : undefined;
}

// Prometheus' text format skips comments other than HELP and TYPE.
export function ownerComment(owner: MetricsOwner): string {
  return `# mymodel_serve owner pid=${owner.pid} start_time=${owner.startTime}\n`;
}

export function ownerOf(text: string): MetricsOwner | undefined {
  const match = OWNER.exec(text);
  return match ? { pid: Number(match[1]), startTime: match[2]! } : undefined;
}

// Left alone: this launcher's own file (`port`), files of live launchers, of
// this process, and files naming no owner.
export async function removeDeadOwnersFiles(
  directory: string,
  port: number,
  self: MetricsOwner,
): Promise<void> {
  const found: { path: string; owner: MetricsOwner; port: number }[] = [];
  const temporaries = new Map<number, string[]>();
  try {
    for await (const entry of Deno.readDir(`${directory}/metrics`)) {
      const path = `${directory}/metrics/${entry.name}`;
      const left = TEMPORARY.exec(entry.name);
      // Regular files only: a link planted there is never followed.
      if (entry.isFile && left) {
        const of = Number(left[1]);
        temporaries.set(of, [...temporaries.get(of) ?? [], path]);
      }
      const match = FILE.exec(entry.name);
      if (!entry.isFile || !match || Number(match[1]) === port) continue;
      const owner = ownerOf(await firstLine(path));
      if (owner) found.push({ path, owner, port: Number(match[1]) });
    }
  } catch {
    return; // no metrics/ to read: the write that follows says so
  }
  const alive = processStartTimes(found.map(({ owner }) => owner.pid));
  for (const { path, owner, port: of } of found) {
    const same = owner.pid === self.pid && owner.startTime === self.startTime;
    if (same || alive.get(owner.pid) === owner.startTime) continue;
    for (const temporary of temporaries.get(of) ?? []) {
      await Deno.remove(temporary).catch(() => {});
    }
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

async function firstLine(path: string): Promise<string> {
  try {
    // Replaced since the listing by a FIFO (an open would block) or a device: skipped.
    if (!(await Deno.lstat(path)).isFile) return "";
    using file = await Deno.open(path);
    const bytes = new Uint8Array(FIRST_LINE_BYTES);
    let filled = 0;
    while (filled < bytes.length) {
      const read = await file.read(bytes.subarray(filled));
      if (read === null) break;
      filled += read;
      if (bytes.subarray(filled - read, filled).includes(10)) break;
    }
    return new TextDecoder().decode(bytes.subarray(0, filled)).split("\n")[0]!;
  } catch {
    return "";
  }
}
