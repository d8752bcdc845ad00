/**
 * Reads process facts from `/proc/<pid>/stat`: state, process group and start
 * time. Deno asks for `--allow-all` to read anything under `/proc`, so under
 * narrowed permissions the same lines are read through `sh` (which the
 * launcher's watchdog needs anyway) with the shell's own `read`.
 *
 * @module
 */

/** What `/proc/<pid>/stat` says of one process. */
export interface ProcStat {
  pid: number;
  /** One letter: R, S, D, Z (zombie), T (stopped) … */
  state: string;
  /** Process group id. */
  pgid: number;
  /** The command name (`comm`, at most 15 characters), e.g. `python3`. */
  comm: string;
  /** Start time in clock ticks since boot (field 22), as text. */
  startTime: string;
}

/** Parses one stat line; the name (field 2) may hold spaces and parentheses. */
function parse(line: string): ProcStat | undefined {
  const close = line.lastIndexOf(")");
  if (close < 0) return undefined;
  const fields = line.slice(close + 2).split(" ");
  const pid = Number(line.slice(0, line.indexOf(" ")));
  if (!Number.isInteger(pid) || fields.length < 20) return undefined;
  return {
    pid,
    state: fields[0]!,
    pgid: Number(fields[2]),
    comm: line.slice(line.indexOf("(") + 1, close),
    startTime: fields[19]!,
  };
}

let direct: boolean | undefined;

/**
 * Whether `/proc` can be read without a shell (only with `--allow-all`);
 * asked once.
 *
 * @returns True when Deno may read `/proc` itself.
 *
 * @example
 * ```ts ignore
 * import { canReadDirectly } from "./proc.ts";
 * const stat = canReadDirectly() ? Deno.readTextFileSync("/proc/1/stat") : undefined;
 * ```
 */
export function canReadDirectly(): boolean {
  if (direct === undefined) {
    try {
      Deno.readTextFileSync(`/proc/${Deno.pid}/stat`);
      direct = true;
    } catch {
      direct = false;
    }
  }
  return direct;
}

/** Stat lines of the files named (shell patterns allowed), read by `sh`. */
function readThroughShell(...patterns: string[]): string[] {
  try {
    const { stdout } = new Deno.Command("sh", {
      args: [
        "-c",
        'for p in "$@"; do for f in $p; do read -r line < "$f" && printf "%s\\n" "$line"; done; done 2>/dev/null',
        "proc",
        ...patterns,
      ],
      stdin: "null",
      stdout: "piped",
      stderr: "null",
    }).outputSync();
    return new TextDecoder().decode(stdout).split("\n").filter(Boolean);
  } catch {
    return []; // no sh, or not allowed: nothing can be known
  }
}

/**
 * One process's stat, or undefined when there is no such process (or it
 * cannot be read at all).
 *
 * @param pid The process id.
 * @returns Its state, group and start time.
 *
 * @example
 * ```ts ignore
 * import { procStat } from "./proc.ts";
 * console.log(procStat(Deno.pid)?.startTime);
 * ```
 */
export function procStat(pid: number): ProcStat | undefined {
  if (!(pid > 0)) return undefined;
  if (canReadDirectly()) {
    try {
      return parse(Deno.readTextFileSync(`/proc/${pid}/stat`));
    } catch {
      return undefined;
    }
  }
  const [line] = readThroughShell(`/proc/${pid}/stat`);
  return line === undefined ? undefined : parse(line);
}

/**
 * Several processes' stats at once (one shell run under narrowed
 * permissions); a pid with no process is missing from the result.
 *
 * @param pids The process ids.
 * @returns Their stats by pid.
 *
 * @example
 * ```ts ignore
 * import { procStats } from "./proc.ts";
 * console.log(procStats([Deno.pid]).get(Deno.pid)?.state);
 * ```
 */
export function procStats(pids: readonly number[]): Map<number, ProcStat> {
  const out = new Map<number, ProcStat>();
  const wanted = pids.filter((pid) => pid > 0);
  if (wanted.length === 0) return out;
  if (canReadDirectly()) {
    for (const pid of wanted) {
      const stat = procStat(pid);
      if (stat) out.set(pid, stat);
    }
    return out;
  }
  for (
    const line of readThroughShell(...wanted.map((p) => `/proc/${p}/stat`))
  ) {
    const stat = parse(line);
    if (stat) out.set(stat.pid, stat);
  }
  return out;
}

/**
 * Every process's stat (one shell run under narrowed permissions).
 *
 * @returns The stats of all processes that could be read.
 *
 * @example
 * ```ts ignore
 * import { allProcStats } from "./proc.ts";
 * const group = allProcStats().filter((p) => p.pgid === 1234);
 * ```
 */
export function allProcStats(): ProcStat[] {
  const out: ProcStat[] = [];
  if (canReadDirectly()) {
    for (const entry of Deno.readDirSync("/proc")) {
      if (!/^\d+$/.test(entry.name)) continue;
      try {
        const stat = parse(Deno.readTextFileSync(`/proc/${entry.name}/stat`));
        if (stat) out.push(stat);
      } catch { /* gone */ }
    }
    return out;
  }
  for (const line of readThroughShell("/proc/[0-9]*/stat")) {
    const stat = parse(line);
    if (stat) out.push(stat);
  }
  return out;
}
