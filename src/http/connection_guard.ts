/**
 * A connection guard in front of `Deno.serve`, which (Deno 2.9) has no
 * header-read, idle or connection-count limits and whose accept loop ends for
 * good on "Too many open files".
 *
 * The guard owns the public listener and accepts in a loop of its own that
 * survives every accept error. It counts connections, closes one over the
 * limit at once, closes a connection that has not sent a complete first
 * request head in time, and closes one that stays idle too long. Only once a
 * first head has arrived does it connect to an internal `Deno.serve` on a
 * loopback port and copy bytes both ways: slow or idle clients cost one
 * descriptor, not three.
 *
 * Under TLS the internal server terminates TLS (Deno cannot close a TLS
 * connection whose handshake never began) and the guard copies encrypted
 * bytes: it connects on the first byte, and the first request the internal
 * server hands to the handler ends the header deadline, so the handshake
 * counts as part of the head.
 *
 * A new TLS pair ({@linkcode GuardedServer.replaceTls}) serves every new
 * connection; open connections keep the pair they began with.
 *
 * It knows sockets, not routes: no HTTP parsing beyond finding the end of
 * the first request head (CRLF CRLF).
 *
 * @module
 */
import { log } from "../common/log.ts";
import { FailureRun } from "../common/log_throttle.ts";
import { sleep } from "../common/sleep.ts";
import {
  FIRST_BACKOFF_MS,
  Internal,
  MAX_BACKOFF_MS,
  type Tracked,
} from "./guard_upstream.ts";

/** What {@linkcode serveGuarded} needs. */
export interface GuardedServeOptions {
  /** Host to listen on. */
  hostname: string;
  /** Port to listen on (0: any free port). */
  port: number;
  /** PEM certificate and key: serve HTTPS. */
  tls?: { cert: string; key: string };
  /** Answers every request; `info.remoteAddr` is the real client's address. */
  handler: Deno.ServeHandler<Deno.NetAddr>;
  // The limits are the launcher's settings (serve/options.ts): no defaults here.
  /**
   * Milliseconds a connection gets to send its first complete request head
   * (TLS handshake included) before it is closed.
   */
  headerTimeoutMs: number;
  /**
   * Milliseconds a connection may pass without a byte either way before it
   * is closed.
   */
  idleTimeoutMs: number;
  /**
   * Connections open at once; one more is accepted and closed at once.
   * Lowered to what `openFilesLimit` leaves room for.
   */
  maxConnections: number;
  /** The soft open-files limit, when known: caps `maxConnections`. */
  openFilesLimit?: number;
  /** Called once the public listener listens. */
  onListen?: (addr: Deno.NetAddr) => void;
}

/**
 * Descriptors one guarded connection may hold at once: the client's socket,
 * the guard's socket to the internal server and that server's end of it.
 */
const FDS_PER_CONNECTION = 3;
/** Descriptors kept for everything else (engine pipes, logs, health polls). */
export const RESERVED_FDS = 128;
/** A first request head larger than this is not a request we serve. */
const MAX_HEAD_BYTES = 64 * 1024;
const HEAD_CHUNK = 4 * 1024;
const PUMP_CHUNK = 16 * 1024;

/**
 * The most connections a soft open-files limit leaves room for.
 *
 * @param openFiles The soft RLIMIT_NOFILE.
 * @returns At least 1.
 */
export function connectionRoom(openFiles: number): number {
  return Math.max(
    1,
    Math.floor((openFiles - RESERVED_FDS) / FDS_PER_CONNECTION),
  );
}

/** Index just past the first CRLF CRLF in `bytes[0, end)`, searching from `from`; -1 if none. */
function headEnd(bytes: Uint8Array, from: number, end: number): number {
  for (let i = Math.max(0, from); i + 3 < end; i++) {
    if (
      bytes[i] === 13 && bytes[i + 1] === 10 && bytes[i + 2] === 13 &&
      bytes[i + 3] === 10
    ) return i + 4;
  }
  return -1;
}

function closeQuietly(conn: Deno.Conn | undefined): void {
  try {
    conn?.close();
  } catch {
    // Already closed: closing is idempotent here on purpose.
  }
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let done = 0;
  while (done < bytes.length) done += await conn.write(bytes.subarray(done));
}

/**
 * Serves `handler` behind a connection guard: header and idle timeouts, a
 * connection limit, and an accept loop that outlives "Too many open files".
 *
 * @param options Where to listen, the handler, and the limits.
 * @returns The running server.
 * @throws {Deno.errors.AddrInUse | Error} When the public listener cannot be opened.
 *
 * @example
 * ```ts ignore
 * await using server = serveGuarded({
 *   hostname: "127.0.0.1",
 *   port: 0,
 *   handler: () => new Response("ok"),
 *   headerTimeoutMs: 10_000,
 *   idleTimeoutMs: 120_000,
 *   maxConnections: 1024,
 * });
 * console.log(server.addr.port);
 * ```
 */
export function serveGuarded(options: GuardedServeOptions): GuardedServer {
  return new GuardedServer(options);
}

/** A running guarded server. */
export class GuardedServer implements AsyncDisposable {
  /** The public listener's address. */
  readonly addr: Deno.NetAddr;
  /** The connection limit in force (after capping to the open-files limit). */
  readonly maxConnections: number;
  /** Resolves once {@linkcode GuardedServer.shutdown} has finished. */
  readonly finished: Promise<void>;
  #listener: Deno.Listener<Deno.Conn, Deno.NetAddr>;
  #internal: Internal;
  #tracked = new Set<Tracked>();
  #headerTimeoutMs: number;
  #tls: boolean;
  #idleTimeoutMs: number;
  #sweep: ReturnType<typeof setInterval>;
  #closing = false;
  #done = Promise.withResolvers<void>();
  #accepting: Promise<void>;
  #handlers = new Set<Promise<void>>();
  #upstreamFailures = new FailureRun(
    "connect a client to the internal HTTP server",
  );

  constructor(options: GuardedServeOptions) {
    this.#headerTimeoutMs = options.headerTimeoutMs;
    this.#idleTimeoutMs = options.idleTimeoutMs;
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
    // Plain TCP even for TLS: the internal server terminates it (module doc).
    this.#tls = options.tls !== undefined;
    this.#listener = Deno.listen({
      hostname: options.hostname,
      port: options.port,
    });
    this.addr = this.#listener.addr;
    this.#internal = new Internal(options.handler, options.tls);
    // One timer for every deadline: cheaper than a timer per connection and byte.
    const tick = Math.min(
      1_000,
      Math.max(
        20,
        Math.floor(Math.min(this.#headerTimeoutMs, this.#idleTimeoutMs) / 10),
      ),
    );
    this.#sweep = setInterval(() => this.#expire(), tick);
    Deno.unrefTimer(this.#sweep);
    this.finished = this.#done.promise;
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
    const now = performance.now();
    for (const t of this.#tracked) {
      if (
        (t.headDeadline !== undefined && now > t.headDeadline) ||
        now - t.lastActive > this.#idleTimeoutMs
      ) {
        closeQuietly(t.conn);
        closeQuietly(t.upstream);
      }
    }
  }

  async #handle(conn: Deno.Conn): Promise<void> {
    const now = performance.now();
    const t: Tracked = {
      conn,
      upstream: undefined,
      headDeadline: now + this.#headerTimeoutMs,
      lastActive: now,
    };
    this.#tracked.add(t);
    try {
      const head = await this.#readHead(t);
      if (!head || this.#closing) return;
      // Under TLS the deadline holds until the internal server sees a request.
      if (!this.#tls) t.headDeadline = undefined;
      const port = await this.#internal.port();
      let upstream: Deno.TcpConn;
      try {
        upstream = await Deno.connect({ hostname: "127.0.0.1", port });
      } catch (error) {
        this.#upstreamFailures.fail(error);
        return;
      }
      this.#upstreamFailures.ok();
      t.upstream = upstream;
      const key = upstream.localAddr.port;
      this.#internal.attach(key, t, port);
      try {
        if (this.#closing) return;
        await writeAll(upstream, head);
        await Promise.all([
          this.#pump(t, conn, upstream, true),
          this.#pump(t, upstream, conn, false),
        ]);
      } finally {
        this.#internal.detach(key);
      }
    } catch {
      // A reset, a close by a deadline or by shutdown: the connection is done.
    } finally {
      this.#tracked.delete(t);
      closeQuietly(t.upstream);
      closeQuietly(conn);
    }
  }

  /**
   * Reads until the end of the first request head (under TLS, the first bytes
   * of the handshake); undefined when the client goes first.
   */
  async #readHead(t: Tracked): Promise<Uint8Array | undefined> {
    let buffer = new Uint8Array(HEAD_CHUNK);
    let length = 0;
    while (true) {
      if (length === buffer.length) {
        if (buffer.length >= MAX_HEAD_BYTES) return undefined;
        const bigger = new Uint8Array(buffer.length * 2);
        bigger.set(buffer);
        buffer = bigger;
      }
      const n = await t.conn.read(buffer.subarray(length));
      if (n === null) return undefined;
      t.lastActive = performance.now();
      const searchFrom = length - 3;
      length += n;
      // The whole buffer goes on: bytes past the head belong to the request body.
      if (this.#tls || headEnd(buffer, searchFrom, length) >= 0) {
        return buffer.subarray(0, length);
      }
    }
  }

  /** Copies `from` → `to` until `from` ends; the client's end half-closes the upstream. */
  async #pump(
    t: Tracked,
    from: Deno.Conn,
    to: Deno.Conn,
    fromClient: boolean,
  ): Promise<void> {
    const buffer = new Uint8Array(PUMP_CHUNK);
    try {
      while (true) {
        const n = await from.read(buffer);
        if (n === null) break;
        t.lastActive = performance.now();
        await writeAll(to, buffer.subarray(0, n));
      }
    } catch {
      // Reset or closed by the other direction: fall through to close.
    }
    if (fromClient) {
      // The response may still be on its way: half-close, let it come back.
      await to.closeWrite().catch(() => closeQuietly(to));
    } else {
      closeQuietly(t.conn);
      closeQuietly(t.upstream);
    }
  }

  /**
   * Serves every new connection with this PEM certificate (chain) and key;
   * open connections keep the pair they began with.
   *
   * @throws {TypeError} When the guard serves plain HTTP.
   * @throws {Error} When the pair is refused (the old one stays in force).
   */
  replaceTls(tls: { cert: string; key: string }): void {
    if (!this.#tls) {
      throw new TypeError(
        "Cannot replace the TLS pair: the server serves plain HTTP (expected a server started with tls)",
      );
    }
    this.#internal.replaceTls(tls);
  }

  /** Stops accepting, closes every connection and the internal server. */
  async shutdown(): Promise<void> {
    if (!this.#closing) {
      this.#closing = true;
      clearInterval(this.#sweep);
      try {
        this.#listener.close();
      } catch {
        // Already closed.
      }
      for (const t of this.#tracked) {
        closeQuietly(t.conn);
        closeQuietly(t.upstream);
      }
      await this.#accepting;
      await Promise.all([...this.#handlers]);
      await this.#internal.stop();
      this.#done.resolve();
    }
    await this.#done.promise;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.shutdown();
  }
}
