/**
 * Engine records under `<directory>/data/`: while an engine runs, one small
 * JSON file says which process it is (pid, group, start time), what it runs
 * and which launcher owns it. A launcher killed outright cannot clean up
 * after itself; the next one on the same directory reads these records, stops
 * what the dead launcher left running, and refuses to share a model with a
 * launcher that is still alive.
 *
 * Processes are identified by pid *and* start time (field 22 of
 * `/proc/<pid>/stat`), so a pid the kernel has since given to another process
 * is never mistaken for the engine.
 *
 * @module
 */
import { ConfigError } from "../common/config_error.ts";
import { log } from "../common/log.ts";
import { sleep } from "../common/sleep.ts";
import { stopGroup } from "../engines/process_group.ts";
import { type ProcStat, procStats } from "../engines/proc.ts";
import { isPortFree } from "../engines/ports.ts";

/** What a run's record says of the run itself. */
export interface RunRecord {
  /** The catalogue name. */
  model: string;
  /** The engine's pid (and process group id). */
  pid: number;
  /** The command line, API key masked. */
  command: string;
  /** Host the engine listens on. */
  host: string;
  /** Port the engine listens on. */
  port: number;
}

/** What is recorded about one running engine: the run, and the launcher that owns it. */
export interface EngineRecord extends RunRecord {
  /** The engine's start time from `/proc/<pid>/stat`, so a reused pid is never taken for it. */
  startTime: string;
  /** The launcher's pid. */
  launcherPid: number;
  /** The launcher's own start time, so a reused launcher pid is not taken for it. */
  launcherStartTime: string;
}

const SUFFIX = ".engine.json";
const PORT_WAIT_MS = 2_000;
/** `/proc` stays unreadable for a process's life: said once. */
let warnedNoProc = false;

/**
 * Reads and writes the records of one root directory.
 */
export class EngineRecords {
  readonly #dir: string;
  readonly #directory: string;
  readonly #launcherStartTime: string;
  readonly #pending = new Map<string, RunRecord>();

  /** @param directory The launcher's root directory. */
  constructor(directory: string) {
    this.#directory = directory;
    this.#dir = `${directory}/data`;
    this.#launcherStartTime = processStartTimes([Deno.pid]).get(Deno.pid) ?? "";
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

  /**
   * Records a running engine of this launcher (atomically: a reader never
   * sees half a record).
   */
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
    for (const record of records) {
      this.#writeOne({
        ...record,
        startTime: stats.get(record.pid)?.startTime ?? "",
        launcherPid: Deno.pid,
        launcherStartTime: this.#launcherStartTime,
      });
    }
  }

  #writeOne(record: EngineRecord): void {
    const path = this.#path(record.model);
    const temp = `${path}.${Deno.pid}.tmp`;
    try {
      Deno.writeTextFileSync(temp, JSON.stringify(record) + "\n");
      Deno.renameSync(temp, path);
    } catch (error) {
      try {
        Deno.removeSync(temp);
      } catch { /* never written */ }
      log.warn(
        `cannot write the record of engine ${record.model} in ${this.#dir}: ${
          (error as Error).message
        }`,
      );
    }
  }

  /** Removes a model's record if this launcher wrote it. */
  remove(model: string): void {
    this.#pending.delete(model);
    const record = readRecord(this.#path(model));
    if (record && record.launcherPid !== Deno.pid) return;
    try {
      Deno.removeSync(this.#path(model));
    } catch { /* already gone */ }
  }

  /** Every readable record, with its path, by model name. */
  #list(): { path: string; record: EngineRecord }[] {
    let names: string[];
    try {
      names = [...Deno.readDirSync(this.#dir)]
        .filter((entry) => entry.isFile && entry.name.endsWith(SUFFIX))
        .map((entry) => entry.name);
    } catch {
      return [];
    }
    return names.flatMap((name) => {
      const path = `${this.#dir}/${name}`;
      const record = readRecord(path);
      return record ? [{ path, record }] : [];
    }).sort((a, b) => a.record.model.localeCompare(b.record.model));
  }

  /**
   * What the records say, read only (a dry run shows it, a start reaps it):
   * the records of other live launchers, those of them serving one of
   * `models`, and the stale records, with whether their engine group still runs.
   *
   * @param models The models this launcher is about to serve.
   * @returns The live, conflicting and stale records.
   */
  survey(models: readonly string[]): RecordSurvey {
    const records = this.#list();
    // One look at every process concerned (one `sh` under narrowed permissions).
    const stats = procStats(
      records.flatMap(({ record }) => [record.launcherPid, record.pid]),
    );
    const launcherAlive = (record: EngineRecord) =>
      stats.get(record.launcherPid)?.startTime === record.launcherStartTime;
    const live = records.filter(({ record }) =>
      record.launcherPid !== Deno.pid && launcherAlive(record)
    ).map(({ record }) => record);
    return {
      live,
      serving: live.filter((record) => models.includes(record.model)),
      stale: records.filter(({ record }) => !launcherAlive(record)).map((
        { path, record },
      ) => ({
        path,
        record,
        running: groupIsRecorded(record, stats.get(record.pid)),
      })),
    };
  }

  /**
   * Start-up check, before any port is checked: a record whose launcher is
   * alive and serves one of the surveyed models refuses the start.
   *
   * @param survey What {@linkcode EngineRecords.survey} found.
   * @throws {ConfigError} When a live launcher serves one of those models from this directory.
   */
  refuseServed(survey: RecordSurvey): void {
    const record = survey.serving[0];
    if (record === undefined) return;
    throw new ConfigError(
      `Cannot start ${record.model}: launcher pid ${record.launcherPid} already serves it from ${this.#directory} (on port ${record.port}; stop that launcher or use another directory)`,
    );
  }

  /**
   * Start-up, once the plan is checked (and so
   * {@linkcode EngineRecords.refuseServed} passed): each stale record's
   * engine group, when still the recorded one, gets SIGTERM, the grace
   * period, then SIGKILL, and the record is removed.
   *
   * @param survey What {@linkcode EngineRecords.survey} found.
   * @param graceMs Time between SIGTERM and SIGKILL.
   */
  async reap(survey: RecordSurvey, graceMs: number): Promise<void> {
    await Promise.all(survey.stale.map(async ({ path, record, running }) => {
      if (running) {
        log.warn(
          `engine ${record.model} (pid ${record.pid}) outlived its launcher (pid ${record.launcherPid}, gone): stopping it`,
        );
        await stopGroup(record.pid, graceMs, { alive: groupLiving });
        // The port is what the new launcher needs: give the kernel a moment to let go of it.
        await portReleased(record.host, record.port, PORT_WAIT_MS);
      }
      try {
        Deno.removeSync(path);
      } catch { /* another launcher reaped it too */ }
    }));
  }
}

/**
 * The start times of the processes named, in one read; a pid with no process
 * is missing, and one with another start time was reused. The metrics files'
 * owners ask this rather than `/proc`.
 */
export function processStartTimes(
  pids: readonly number[],
): Map<number, string> {
  return new Map(
    [...procStats(pids)].map(([pid, stat]) => [pid, stat.startTime]),
  );
}

/** What {@linkcode EngineRecords.survey} found. */
export interface RecordSurvey {
  /** Records of launchers other than this one that are alive. */
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

/**
 * True when the recorded engine's group is still there: the leader alive with
 * its recorded start time, or, the leader gone, members of its group left.
 * (Linux does not hand out a pid while a group of that id exists, so a group
 * without its leader is still the engine's.)
 */
function groupIsRecorded(
  record: EngineRecord,
  leader: ProcStat | undefined,
): boolean {
  if (leader !== undefined) {
    return leader.startTime === record.startTime && leader.pgid === record.pid;
  }
  return groupLiving(record.pid);
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

/** Waits until nothing listens on the port, or `ms` have passed. */
async function portReleased(
  hostname: string,
  port: number,
  ms: number,
): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (isPortFree(hostname, port)) return;
    await sleep(50);
  }
}
