// Which process listens on a TCP port: the socket's inode from
// `/proc/net/tcp*`, the process holding `socket:[<inode>]`, its name from
// `/proc/<pid>/comm`; only this user's processes can be found. Under narrowed
// permissions the same files are read through `sh`.
import { canReadDirectly, shLines } from "./proc.ts";

interface PortHolder {
  pid: number;
  /** Empty when it could not be read. */
  command: string;
}

// `st` of a socket in LISTEN state.
const LISTEN = "0A";

/** From the text of `/proc/net/tcp` or `/proc/net/tcp6`, header included. */
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
  const inodes = new Set<string>();
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    try {
      const text = Deno.readTextFileSync(table);
      for (const inode of listeningInodes(text, port)) inodes.add(inode);
    } catch { /* no IPv6, say */ }
  }
  if (inodes.size === 0) return [];
  const targets = new Set([...inodes].map((inode) => `socket:[${inode}]`));
  const out: PortHolder[] = [];
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    let fds: Deno.DirEntry[];
    try {
      fds = [...Deno.readDirSync(`/proc/${entry.name}/fd`)];
    } catch {
      continue; // another user's, or gone
    }
    const holds = fds.some((fd) => {
      try {
        return targets.has(
          Deno.readLinkSync(`/proc/${entry.name}/fd/${fd.name}`),
        );
      } catch {
        return false;
      }
    });
    if (!holds) continue;
    let command = "";
    try {
      command = Deno.readTextFileSync(`/proc/${entry.name}/comm`).trim();
    } catch { /* gone */ }
    out.push({ pid: Number(entry.name), command });
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
