// Whether a TCP port is free and, when it is not, which process listens on
// it, from /proc (through `sh`, as proc.ts says): only this user's are found.
import { ConfigError } from "../common/config_error.ts";
import { attempt, shLines } from "./proc.ts";

export function isPortFree(hostname: string, port: number): boolean {
  return attempt(() => {
    Deno.listen({ hostname, port }).close();
    return true;
  }, false);
}

/**
 * `host` says where the host came from (`NUCLEUS_HOST=h`), for an error that
 * is the host's: a name that does not resolve, an address not on this machine.
 *
 * @throws {ConfigError} `Cannot use port 5000 on localhost for the management API: already in use by pid 4711 (python3) (expected a free port: stop that process, or choose another with --port)`
 */
export function checkPortFree(
  hostname: string,
  port: number,
  what: string,
  host = `--host=${hostname}`,
): void {
  try {
    Deno.listen({ hostname, port }).close();
  } catch (cause) {
    const { AddrInUse, PermissionDenied, NotCapable } = Deno.errors;
    if (
      ![AddrInUse, PermissionDenied, NotCapable].some((c) => cause instanceof c)
    ) {
      const why = (cause as Error).message;
      throw new ConfigError(
        `Cannot use ${host}: ${why} (expected a name or address of this machine to listen on)`,
        { cause },
      );
    }
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

/** From the text of `/proc/net/tcp` or `/proc/net/tcp6`. */
export function listeningInodes(table: string, port: number): string[] {
  const hex = port.toString(16).toUpperCase().padStart(4, "0");
  const out: string[] = [];
  for (const line of table.split("\n").slice(1)) {
    // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode;
    // st 0A is LISTEN.
    const fields = line.trim().split(/\s+/);
    const [local, inode] = [fields[1], fields[9]];
    if (fields[3] !== "0A" || !local || !inode || inode === "0") continue;
    if (local.slice(local.lastIndexOf(":") + 1).toUpperCase() !== hex) continue;
    if (!out.includes(inode)) out.push(inode);
  }
  return out;
}

// POSIX sh: the processes whose descriptors point at each socket inode
// given, as `<pid> <comm>` lines.
const HOLDERS = `for inode in "$@"; do
  find /proc/[0-9]*/fd -maxdepth 1 -lname "socket:\\\\[$inode\\\\]" 2>/dev/null
done | while IFS=/ read -r _ _ pid _; do
  comm=""; read -r comm < "/proc/$pid/comm"; printf '%s %s\\n' "$pid" "$comm"
done 2>/dev/null
`;

/** Lowest pid first; `command` empty when it could not be read. */
export function portHolders(port: number): { pid: number; command: string }[] {
  const args = ["port-tables", "/proc/net/tcp", "/proc/net/tcp6"];
  const tables = shLines('cat "$@" 2>/dev/null', args);
  const inodes = listeningInodes(tables.join("\n"), port);
  if (inodes.length === 0) return [];
  const unique = new Map<number, { pid: number; command: string }>();
  for (const line of shLines(HOLDERS, ["port-holder", ...inodes])) {
    const match = /^(\d+) ?(.*)$/.exec(line);
    const pid = Number(match?.[1]);
    if (match) unique.set(pid, { pid, command: match[2]! });
  }
  return [...unique.values()].sort((a, b) => a.pid - b.pid);
}
