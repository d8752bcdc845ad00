// A connection guard in front of `Deno.serve`, which (Deno 2.9) has no
// header-read, idle or connection-count limits and whose accept loop ends for
// good on "Too many open files". The guard accepts in a loop that survives
// every accept error, and only once a client's first bytes arrive connects it
// to an internal `Deno.serve` on loopback: idle clients cost one descriptor,
// not three. The internal server answers only the guard's connections (421 to
// anyone else), ends a connection's header deadline when it sees its first
// request (the guard parses nothing, and under TLS cannot), and is started
// again when it stops.
//
// Under TLS the internal server terminates TLS (Deno cannot close a TLS
// connection whose handshake never began); the guard copies encrypted bytes.
import { log } from "../common/log.ts";
import { FailureRun } from "../common/log_throttle.ts";
import { oneLine } from "../common/one_line.ts";
import { type Clock, REAL_CLOCK, sleep } from "../common/sleep.ts";

type TlsPair = { cert: string; key: string };

export interface GuardedServeOptions {
  hostname: string;
  port: number;
  tls?: TlsPair;
  /** `info.remoteAddr` is the real client's address. */
  handler: Deno.ServeHandler<Deno.NetAddr>;
  /** For the first complete request head, TLS handshake included. */
  headerTimeoutMs: number;
  /** Without a byte either way. */
  idleTimeoutMs: number;
  /** One more is accepted and closed at once; capped by `openFilesLimit`. */
  maxConnections: number;
  openFilesLimit?: number;
  onListen?: (addr: Deno.NetAddr) => void;
  /** The deadlines' time and sweep; monotonic by default (a wall-clock step moves no deadline). */
  clock?: Clock;
}

type InternalServer = Deno.HttpServer<Deno.NetAddr>;

interface Tracked {
  conn: Deno.Conn;
  upstream?: Deno.TcpConn;
  /** The internal server it went to: each TLS pair has its own. */
  server?: InternalServer;
  /** Undefined once the internal server has seen a request. */
  headDeadline: number | undefined;
  lastActive: number;
}

/** The client's socket, the guard's socket to the internal server, and its end of it. */
const FDS_PER_CONNECTION = 3;
/** For everything else: engine pipes, logs, health polls. */
export const RESERVED_FDS = 128;
const PUMP_CHUNK = 16 * 1024;
const FIRST_BACKOFF_MS = 10;
const MAX_BACKOFF_MS = 1_000;

export function connectionRoom(openFiles: number): number {
  const room = Math.floor((openFiles - RESERVED_FDS) / FDS_PER_CONNECTION);
  return Math.max(1, room);
}

function closeQuietly(closable: { close(): void } | undefined): void {
  try {
    closable?.close();
  } catch {
    // Already closed: closing is idempotent here on purpose.
  }
}

function drop(t: Tracked): void {
  closeQuietly(t.conn);
  closeQuietly(t.upstream);
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let done = 0;
  while (done < bytes.length) done += await conn.write(bytes.subarray(done));
}

export class GuardedServer implements AsyncDisposable {
  readonly addr: Deno.NetAddr;
  /** After capping to the open-files limit. */
  readonly maxConnections: number;
  #listener: Deno.Listener<Deno.Conn, Deno.NetAddr>;
  #options: GuardedServeOptions;
  #tls: TlsPair | undefined;
  #tracked = new Set<Tracked>();
  /** By the guard-side port of each connection to an internal server. */
  #byUpstreamPort = new Map<number, Tracked>();
  /** Serves new connections; undefined until the first, and after it stopped. */
  #internal: InternalServer | undefined;
  /** Every internal server not finished yet, older TLS pairs' included. */
  #servers = new Set<InternalServer>();
  #internalFailures = new FailureRun("serve the internal HTTP server");
  #upstreamFailures = new FailureRun(
    "connect a client to the internal HTTP server",
  );
  #clock: Clock;
  #stopSweep: () => void;
  #closing = false;
  #stopped: Promise<void> | undefined;
  #accepting: Promise<void>;
  #handlers = new Set<Promise<void>>();

  constructor(options: GuardedServeOptions) {
    this.#options = options;
    this.#tls = options.tls;
    this.#clock = options.clock ?? REAL_CLOCK;
    const wanted = options.maxConnections;
    const room = options.openFilesLimit === undefined
      ? Infinity
      : connectionRoom(options.openFilesLimit);
    this.maxConnections = Math.min(wanted, room);
    if (this.maxConnections < wanted) {
      log.warn(
        `max connections ${wanted} lowered to ${this.maxConnections}: the open-files limit ${options.openFilesLimit} leaves room for that many at ${FDS_PER_CONNECTION} descriptors each, ${RESERVED_FDS} kept for the rest`,
      );
    }
    const { hostname, port } = options;
    this.#listener = Deno.listen({ hostname, port });
    this.addr = this.#listener.addr;
    // One timer for every deadline: cheaper than a timer per connection and byte.
    const shortest = Math.min(options.headerTimeoutMs, options.idleTimeoutMs);
    const tick = Math.min(1_000, Math.max(20, shortest / 10));
    const sweep = () => {
      this.#expire();
      this.#stopSweep = this.#clock.schedule(sweep, tick);
    };
    this.#stopSweep = this.#clock.schedule(sweep, tick);
    this.#accepting = this.#acceptLoop();
    options.onListen?.(this.addr);
  }

  async #acceptLoop(): Promise<void> {
    const failures = new FailureRun("accept a connection");
    let backoff = FIRST_BACKOFF_MS;
    while (!this.#closing) {
      let conn: Deno.Conn;
      try {
        conn = await this.#listener.accept();
      } catch (error) {
        if (this.#closing) return;
        // EMFILE, ENFILE, ENOBUFS, ECONNABORTED...: the listener is still good.
        failures.fail(error);
        await sleep(backoff);
        backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
        continue;
      }
      failures.ok();
      backoff = FIRST_BACKOFF_MS;
      if (this.#tracked.size >= this.maxConnections) {
        // Closed at once rather than left to fill the kernel's backlog.
        closeQuietly(conn);
        continue;
      }
      const handling = this.#handle(conn);
      this.#handlers.add(handling);
      handling.finally(() => this.#handlers.delete(handling));
    }
  }

  #expire(): void {
    const now = this.#clock.now();
    const idle = this.#options.idleTimeoutMs;
    const late = (t: Tracked) =>
      now > (t.headDeadline ?? Infinity) || now - t.lastActive > idle;
    for (const t of this.#tracked) if (late(t)) drop(t);
  }

  async #handle(conn: Deno.Conn): Promise<void> {
    const now = this.#clock.now();
    const t: Tracked = {
      conn,
      headDeadline: now + this.#options.headerTimeoutMs,
      lastActive: now,
    };
    this.#tracked.add(t);
    try {
      const head = new Uint8Array(PUMP_CHUNK);
      const n = await conn.read(head);
      if (n === null || this.#closing) return;
      t.lastActive = this.#clock.now();
      let upstream: Deno.TcpConn;
      try {
        t.server = this.#internal ??= this.#listen(this.#tls);
        const { port } = t.server.addr;
        upstream = await Deno.connect({ hostname: "127.0.0.1", port });
      } catch (error) {
        this.#upstreamFailures.fail(error);
        return;
      }
      this.#upstreamFailures.ok();
      t.upstream = upstream;
      this.#byUpstreamPort.set(upstream.localAddr.port, t);
      if (this.#closing) return;
      await writeAll(upstream, head.subarray(0, n));
      await Promise.all([
        // The response may still be on its way: half-close, let it come back.
        this.#copy(t, conn, upstream).then(() => upstream.closeWrite())
          .catch(() => closeQuietly(upstream)),
        this.#copy(t, upstream, conn).then(() => drop(t)),
      ]);
    } catch {
      // A reset, a close by a deadline or by shutdown: the connection is done.
    } finally {
      this.#tracked.delete(t);
      if (t.upstream) this.#byUpstreamPort.delete(t.upstream.localAddr.port);
      drop(t);
      if (t.server) this.#shutdownIfUnused(t.server);
    }
  }

  /** Until `from` ends; a reset or a close by the other direction ends it too. */
  async #copy(t: Tracked, from: Deno.Conn, to: Deno.Conn): Promise<void> {
    const buffer = new Uint8Array(PUMP_CHUNK);
    try {
      while (true) {
        const n = await from.read(buffer);
        if (n === null) return;
        t.lastActive = this.#clock.now();
        await writeAll(to, buffer.subarray(0, n));
      }
    } catch {
      // The caller closes.
    }
  }

  #listen(tls: TlsPair | undefined): InternalServer {
    const server = Deno.serve({
      hostname: "127.0.0.1",
      port: 0,
      onListen: () => {},
      onError(error) {
        log.error(`Cannot answer a request: ${oneLine(error)}`);
        return new Response("Internal Server Error", { status: 500 });
      },
      ...(tls ?? {}),
    }, (req, info) => this.#serveInternal(req, info));
    this.#internalFailures.ok();
    this.#servers.add(server);
    // Rejected when its accept loop fails (EMFILE): it has stopped for good.
    server.finished.catch((error: unknown) => error).then((error) => {
      this.#servers.delete(server);
      if (this.#internal !== server) return;
      this.#internal = undefined;
      if (!this.#closing) {
        this.#internalFailures.fail(
          error ?? new Error("the internal server stopped"),
        );
      }
    });
    return server;
  }

  #serveInternal(
    req: Request,
    info: Deno.ServeHandlerInfo<Deno.NetAddr>,
  ): Response | Promise<Response> {
    const client = this.#byUpstreamPort.get(info.remoteAddr.port);
    // Not from the guard: someone found the internal port. Serve nothing.
    if (!client) return new Response(null, { status: 421 });
    client.headDeadline = undefined;
    const remoteAddr = client.conn.remoteAddr as Deno.NetAddr;
    return this.#options.handler(req, { ...info, remoteAddr });
  }

  /** A server of an older TLS pair ends with the last connection that uses it. */
  #shutdownIfUnused(server: InternalServer): void {
    if (server === this.#internal) return;
    for (const t of this.#tracked) if (t.server === server) return;
    server.shutdown().catch(() => {});
  }

  /** For new connections; open ones keep their pair. A refused pair leaves the old one in force. */
  replaceTls(tls: TlsPair): void {
    if (!this.#tls) {
      throw new TypeError(
        "Cannot replace the TLS pair: the server serves plain HTTP (expected a server started with tls)",
      );
    }
    const old = this.#internal;
    this.#internal = this.#listen(tls);
    this.#tls = tls;
    if (old) this.#shutdownIfUnused(old);
  }

  shutdown(): Promise<void> {
    return this.#stopped ??= this.#stop();
  }

  async #stop(): Promise<void> {
    this.#closing = true;
    this.#stopSweep();
    closeQuietly(this.#listener);
    for (const t of this.#tracked) drop(t);
    await this.#accepting;
    await Promise.all([...this.#handlers]);
    await Promise.all(
      [...this.#servers].map((server) => server.shutdown().catch(() => {})),
    );
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.shutdown();
  }
}
