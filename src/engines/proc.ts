// Deno asks for `--allow-all` to read anything under `/proc`: without it the
// lines are read through `sh` with the shell's own `read`.

export interface ProcStat {
  pid: number;
  /** R, S, D, Z (zombie), T (stopped) … */
  state: string;
  pgid: number;
  comm: string;
  /** Clock ticks since boot (field 22), as text. */
  startTime: string;
}

// The name (field 2) may hold spaces and parentheses.
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

export function attempt<T>(read: () => T, otherwise: T): T {
  try {
    return read();
  } catch {
    return otherwise;
  }
}

/** What a POSIX `sh` script prints, by line; none without sh or leave to run it. */
export function shLines(script: string, args: readonly string[]): string[] {
  const run = () =>
    new Deno.Command("sh", {
      args: ["-c", script, ...args],
      stdin: "null",
      stdout: "piped",
      stderr: "null",
    }).outputSync().stdout;
  return new TextDecoder().decode(attempt(run, new Uint8Array())).split("\n")
    .filter(Boolean);
}

/** A `/proc` file's text, read directly where allowed, else through `sh` (under a list of paths Deno demands --allow-all for /proc); "" when neither can. */
export function procFile(path: string): string {
  return attempt(() => Deno.readTextFileSync(path), "") ||
    shLines('while read -r l; do echo "$l"; done <"$1"', [path]).join("\n");
}

let direct: boolean | undefined;

// Read directly where allowed: no spawn each health round, no need of `sh`.
function statLines(paths: string[] | undefined): string[] {
  direct ??= attempt(() => !!Deno.readTextFileSync("/proc/self/stat"), false);
  if (!direct) {
    return shLines(
      'for p in "$@"; do for f in $p; do read -r line < "$f" && printf "%s\\n" "$line"; done; done 2>/dev/null',
      ["proc", ...paths ?? ["/proc/[0-9]*/stat"]],
    );
  }
  paths ??= [...Deno.readDirSync("/proc")]
    .filter((entry) => /^\d+$/.test(entry.name))
    .map((entry) => `/proc/${entry.name}/stat`);
  return paths.flatMap((path) =>
    attempt(() => [Deno.readTextFileSync(path)], [])
  );
}

/** Every process's when none are named; a pid with no process is missing. */
export function procStats(pids?: readonly number[]): Map<number, ProcStat> {
  const paths = pids?.filter((pid) => pid > 0).map((p) => `/proc/${p}/stat`);
  const out = new Map<number, ProcStat>();
  if (paths?.length === 0) return out;
  for (const line of statLines(paths)) {
    const stat = parse(line);
    if (stat) out.set(stat.pid, stat);
  }
  return out;
}
