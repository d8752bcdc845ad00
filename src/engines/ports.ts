// Whether a TCP port is free and, when it is not, which process listens on
// it, from /proc: only this user's can be found. Under narrowed permissions
// the same files are read through `sh`.
import { ConfigError } from "../common/config_error.ts";
import { attempt, canReadDirectly, shLines } from "./proc.ts";

export function isPortFree(hostname: string, port: number): boolean {
  try {
    Deno.listen({ hostname, port }).close();
    return true;
  } catch {
    return false;
  }
}

/** @throws {ConfigError} `Cannot use port 5000 on localhost for the management API: already in use by pid 4711 (python3) (expected a free port: stop that process, or choose another with --port)` */
export function checkPortFree(
  hostname: string,
  port: number,
  what: string,
): void {
  try {
    Deno.listen({ hostname, port }).close();
  } catch (cause) {
    throw new ConfigError(
      `Cannot use port ${port} on ${hostname} for ${what}: ${
        cause instanceof Deno.errors.AddrInUse
          ? inUse(port, what)
          : (cause as Error).message
      }`,
      { cause },
    );
  }
}

function inUse(port: number, what: string): string {
  const holders = portHolders(port);
  const by = holders.length === 0
    ? ""
    : ` by ${
      holders.slice(0, 3).map((h) =>
        `pid ${h.pid}${h.command ? ` (${h.command})` : ""}`
      ).join(", ")
    }${holders.length > 3 ? ` and ${holders.length - 3} more` : ""}`;
  const stop = holders.length === 0
    ? ""
    : holders.length === 1
    ? "stop that process, or "
    : "stop those processes, or ";
  // Engines take the ports after --port, so moving --port moves them too.
  const move = what.startsWith("engine ")
    ? "move the block with --port (engines listen on --port+1, --port+2, ...)"
    : "choose another with --port";
  return `already in use${by} (expected a free port: ${stop}${move})`;
}

interface PortHolder {
  pid: number;
  /** Empty when it could not be read. */
  command: string;
}

// `st` of a socket in LISTEN state.
const LISTEN = "0A";

/** From the text of `/proc/net/tcp` or `/proc/net/tcp6`. */
export function listeningInodes(table: string, port: number): string[] {
  const hex = port.toString(16).toUpperCase().padStart(4, "0");
  const out: string[] = [];
  for (const line of table.split("\n").slice(1)) {
    // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
    const fields = line.trim().split(/\s+/);
    const local = fields[1];
    const inode = fields[9];
    if (fields[3] !== LISTEN || !local || !inode || inode === "0") continue;
    if (local.slice(local.lastIndexOf(":") + 1).toUpperCase() !== hex) continue;
    if (!out.includes(inode)) out.push(inode);
  }
  return out;
}

function direct(port: number): PortHolder[] {
  const targets = new Set(
    ["/proc/net/tcp", "/proc/net/tcp6"].flatMap((table) =>
      attempt(() => listeningInodes(Deno.readTextFileSync(table), port), [])
    ).map((inode) => `socket:[${inode}]`),
  );
  if (targets.size === 0) return [];
  const out: PortHolder[] = [];
  for (const { name } of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    // Another user's, or gone: nothing to read.
    const fds = attempt(() => [...Deno.readDirSync(`/proc/${name}/fd`)], []);
    const holds = fds.some((fd) =>
      attempt(
        () => targets.has(Deno.readLinkSync(`/proc/${name}/fd/${fd.name}`)),
        false,
      )
    );
    if (!holds) continue;
    const comm = attempt(() => Deno.readTextFileSync(`/proc/${name}/comm`), "");
    out.push({ pid: Number(name), command: comm.trim() });
  }
  return out;
}

// POSIX sh: the LISTEN inodes of port $1 (4 hex digits), then the processes
// whose descriptors point at each, as `<pid> <comm>` lines.
const SCRIPT = `for t in /proc/net/tcp /proc/net/tcp6; do
  [ -r "$t" ] || continue
  while read -r _ local _ st _ _ _ _ _ inode _; do
    [ "$st" = 0A ] && [ "\${local##*:}" = "$1" ] && [ "$inode" != 0 ] && printf '%s\\n' "$inode"
  done < "$t"
done | sort -u | while read -r inode; do
  find /proc/[0-9]*/fd -maxdepth 1 -lname "socket:\\\\[$inode\\\\]" 2>/dev/null
done | while IFS=/ read -r _ _ pid _; do
  comm=""; read -r comm < "/proc/$pid/comm"; printf '%s %s\\n' "$pid" "$comm"
done 2>/dev/null
`;

function throughShell(port: number): PortHolder[] {
  const hex = port.toString(16).toUpperCase().padStart(4, "0");
  return shLines(SCRIPT, ["port-holder", hex]).flatMap((line) => {
    const match = /^(\d+) ?(.*)$/.exec(line);
    return match ? [{ pid: Number(match[1]), command: match[2]! }] : [];
  });
}

/** Lowest pid first; empty when nothing can be known. */
export function portHolders(port: number): PortHolder[] {
  const found = canReadDirectly() ? direct(port) : throughShell(port);
  const unique = new Map<number, PortHolder>();
  for (const holder of found) unique.set(holder.pid, holder);
  return [...unique.values()].sort((a, b) => a.pid - b.pid);
}
