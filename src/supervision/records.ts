// Engine records under `<directory>/data/`: while an engine runs, one small
// JSON file says which process it is, what it runs and which launcher owns
// it. A launcher killed outright cannot clean up after itself; the next one
// on the same directory stops what it left running, and refuses to share a
// model with a launcher still alive. Processes are known by pid *and* start
// time (field 22 of `/proc/<pid>/stat`): a reused pid is never taken for one.
import { writeFileAtomicSync } from "../common/atomic_write.ts";
import { ConfigError } from "../common/config_error.ts";
import { log } from "../common/log.ts";
import { sleep } from "../common/sleep.ts";
import { stopGroup } from "../engines/process_group.ts";
import { type ProcStat, procStats } from "../engines/proc.ts";
import { isPortFree } from "../engines/ports.ts";

export interface RunRecord {
  model: string;
  pid: number;
  command: string;
  host: string;
  port: number;
}

export interface EngineRecord extends RunRecord {
  startTime: string;
  launcherPid: number;
  launcherStartTime: string;
}

/** A process by pid and start time; where files of this launcher name their owner. */
export interface Owner {
  readonly pid: number;
  readonly startTime: string;
}

/** This launcher; undefined where `/proc` cannot say its start time. */
export function thisLauncher(): Owner | undefined {
  const startTime = procStats([Deno.pid]).get(Deno.pid)?.startTime;
  return startTime ? { pid: Deno.pid, startTime } : undefined;
}

/** Those still running, in one read of `/proc`. */
export function living(owners: readonly Owner[]): Set<Owner> {
  const stats = procStats(owners.map((owner) => owner.pid));
  const alive = (o: Owner) => stats.get(o.pid)?.startTime === o.startTime;
  return new Set(owners.filter(alive));
}

const SUFFIX = ".engine.json";
const PORT_WAIT_MS = 2_000;
let warnedNoProc = false;

export class EngineRecords {
  readonly #dir: string;
  readonly #directory: string;
  readonly #launcherStartTime: string;
  readonly #pending = new Map<string, RunRecord>();

  constructor(directory: string) {
    this.#directory = directory;
    this.#dir = `${directory}/data`;
    this.#launcherStartTime = thisLauncher()?.startTime ?? "";
    if (!this.#launcherStartTime && !warnedNoProc) {
      warnedNoProc = true;
      log.warn(
        "cannot read /proc (neither directly nor through sh): engine records cannot tell a live process from a reused pid, so nothing left by a killed launcher will be stopped",
      );
    }
  }

  #path(model: string): string {
    return `${this.#dir}/${model}${SUFFIX}`;
  }

  write(record: RunRecord): void {
    // Engines start in one synchronous loop: their start times are read in one
    // go right after it (one `sh` under narrowed permissions, not one each).
    this.#pending.set(record.model, record);
    if (this.#pending.size === 1) queueMicrotask(() => this.#flush());
  }

  #flush(): void {
    const records = [...this.#pending.values()];
    this.#pending.clear();
    const stats = procStats(records.map((r) => r.pid));
    for (const run of records) {
      const record: EngineRecord = {
        ...run,
        startTime: stats.get(run.pid)?.startTime ?? "",
        launcherPid: Deno.pid,
        launcherStartTime: this.#launcherStartTime,
      };
      try {
        // Never through a link planted at a predictable temporary name.
        const path = this.#path(run.model);
        writeFileAtomicSync(path, JSON.stringify(record) + "\n");
      } catch (error) {
        const why = (error as Error).message;
        log.warn(
          `cannot write the record of engine ${run.model} in ${this.#dir}: ${why}`,
        );
      }
    }
  }

  remove(model: string): void {
    this.#pending.delete(model);
    const record = readRecord(this.#path(model));
    if (record && record.launcherPid !== Deno.pid) return;
    try {
      Deno.removeSync(this.#path(model));
    } catch { /* already gone */ }
  }

  #list(): { path: string; record: EngineRecord }[] {
    let entries: Deno.DirEntry[] = [];
    try {
      entries = [...Deno.readDirSync(this.#dir)];
    } catch { /* no records yet */ }
    return entries.flatMap(({ name, isFile }) => {
      const path = `${this.#dir}/${name}`;
      const record = isFile && name.endsWith(SUFFIX) && readRecord(path);
      return record ? [{ path, record }] : [];
    }).sort((a, b) => a.record.model.localeCompare(b.record.model));
  }

  /** Read only: a dry run shows it, a start reaps it. */
  survey(models: readonly string[]): RecordSurvey {
    const records = this.#list();
    // One look at every process concerned (one `sh` under narrowed permissions).
    const stats = procStats(
      records.flatMap(({ record }) => [record.launcherPid, record.pid]),
    );
    const live: EngineRecord[] = [];
    const stale: RecordSurvey["stale"][number][] = [];
    for (const { path, record } of records) {
      const launcher = stats.get(record.launcherPid);
      if (launcher?.startTime !== record.launcherStartTime) {
        stale.push({ path, record, running: groupIsRecorded(record, stats) });
      } else if (record.launcherPid !== Deno.pid) live.push(record);
    }
    const serving = live.filter((record) => models.includes(record.model));
    return { live, serving, stale };
  }

  /** Before any port is checked: a live launcher serving one of the models refuses the start. */
  refuseServed(survey: RecordSurvey): void {
    const record = survey.serving[0];
    if (record === undefined) return;
    throw new ConfigError(
      `Cannot start ${record.model}: launcher pid ${record.launcherPid} already serves it from ${this.#directory} (on port ${record.port}; stop that launcher or use another directory)`,
    );
  }

  /** Once the plan is checked: each stale record's group, still the recorded one, is stopped; the record goes. */
  async reap(survey: RecordSurvey, graceMs: number): Promise<void> {
    await Promise.all(survey.stale.map(async ({ path, record, running }) => {
      if (running) {
        log.warn(
          `engine ${record.model} (pid ${record.pid}) outlived its launcher (pid ${record.launcherPid}, gone): stopping it`,
        );
        await stopGroup(record.pid, graceMs, { alive: groupLiving });
        // The port is what the new launcher needs: give the kernel a moment to let go of it.
        await portReleased(record.host, record.port);
      }
      try {
        Deno.removeSync(path);
      } catch { /* another launcher reaped it too */ }
    }));
  }
}

export interface RecordSurvey {
  readonly live: readonly EngineRecord[];
  /** Those of them serving a model this launcher is about to serve. */
  readonly serving: readonly EngineRecord[];
  /** Records of dead launchers; `running` when their engine group is still there. */
  readonly stale: readonly {
    readonly path: string;
    readonly record: EngineRecord;
    readonly running: boolean;
  }[];
}

/** The leader with its recorded start time, or members of its group left (Linux reuses no pid while its group exists). */
function groupIsRecorded(
  record: EngineRecord,
  stats: Map<number, ProcStat>,
): boolean {
  const leader = stats.get(record.pid);
  return leader === undefined
    ? groupLiving(record.pid)
    : leader.startTime === record.startTime && leader.pgid === record.pid;
}

function readRecord(path: string): EngineRecord | undefined {
  try {
    const value = JSON.parse(Deno.readTextFileSync(path));
    const valid = typeof value?.model === "string" &&
      Number.isInteger(value.pid) && typeof value.startTime === "string" &&
      Number.isInteger(value.launcherPid) &&
      typeof value.launcherStartTime === "string";
    return valid ? value as EngineRecord : undefined;
  } catch {
    return undefined;
  }
}

/** True while a process of the group has not exited (zombies are dead: only a wait removes them). */
function groupLiving(pgid: number): boolean {
  return [...procStats().values()].some((p) =>
    p.pgid === pgid && p.state !== "Z"
  );
}

async function portReleased(host: string, port: number): Promise<void> {
  const deadline = performance.now() + PORT_WAIT_MS;
  while (performance.now() < deadline) {
    if (isPortFree(host, port)) return;
    await sleep(50);
  }
}
