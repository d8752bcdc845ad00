/**
 * The internal side of the connection guard: a `Deno.serve` on a random
 * loopback port that answers only connections the guard made (421 to anyone
 * else), sees each request with the real client's address, and is started
 * again, with a backoff, whenever it stops.
 *
 * @module
 */
import { sleep } from "../common/sleep.ts";
import { FailureRun } from "../common/log_throttle.ts";
import { log } from "../common/log.ts";
import { oneLine } from "../common/one_line.ts";

export const FIRST_BACKOFF_MS = 10;
export const MAX_BACKOFF_MS = 1_000;

export interface Tracked {
  conn: Deno.Conn;
  upstream: Deno.Conn | undefined;
  /** Undefined once the head arrived. */
  headDeadline: number | undefined;
  lastActive: number;
  /** The internal server it went to (a TLS pair each). */
  internalPort?: number;
}

/**
 * Restarted when it fails. A new TLS pair starts a new server for new
 * connections; the old one serves its open connections until the last ends.
 */
export class Internal {
  #handler: Deno.ServeHandler<Deno.NetAddr>;
  /** Guard-side local port of each upstream connection → the real client's address. */
  readonly clients = new Map<number, Tracked>();
  #server: Deno.HttpServer<Deno.NetAddr> | undefined;
  /** Servers of an older TLS pair, by port, while connections still use them. */
  #retired = new Map<number, Deno.HttpServer<Deno.NetAddr>>();
  #draining = new Set<Promise<void>>();
  #swapped = Promise.withResolvers<void>();
  #ready = Promise.withResolvers<number>();
  #stopping = false;
  #failures = new FailureRun("serve the internal HTTP server");
  readonly #loop: Promise<void>;

  #tls: { cert: string; key: string } | undefined;

  constructor(
    handler: Deno.ServeHandler<Deno.NetAddr>,
    tls: { cert: string; key: string } | undefined,
  ) {
    this.#tls = tls;
    this.#handler = handler;
    this.#loop = this.#run();
  }

  /** Waits while the server restarts. */
  port(): Promise<number> {
    return this.#ready.promise;
  }

  async #run(): Promise<void> {
    let backoff = FIRST_BACKOFF_MS;
    while (!this.#stopping) {
      try {
        let watched = this.#listen(this.#tls);
        this.#server = watched;
        this.#ready.resolve(watched.addr.port);
        this.#failures.ok();
        backoff = FIRST_BACKOFF_MS;
        while (true) {
          this.#swapped = Promise.withResolvers<void>();
          await Promise.race([watched.finished, this.#swapped.promise]);
          if (this.#stopping) return;
          if (watched === this.#server) break;
          // A new TLS pair replaced it: watch the new server.
          watched = this.#server ?? watched;
        }
        this.#server = undefined;
        throw new Error("the internal server stopped");
      } catch (error) {
        if (this.#stopping) return;
        this.#failures.fail(error);
        this.#ready = Promise.withResolvers<number>();
        await sleep(backoff);
        backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
      }
    }
  }

  #listen(
    tls: { cert: string; key: string } | undefined,
  ): Deno.HttpServer<Deno.NetAddr> {
    return Deno.serve({
      hostname: "127.0.0.1",
      port: 0,
      onListen: () => {},
      onError: answerError,
      ...(tls ?? {}),
    }, (req, info) => this.#serve(req, info));
  }

  replaceTls(tls: { cert: string; key: string }): void {
    const current = this.#server;
    if (current === undefined) {
      // Restarting after a failure: the next server takes the new pair.
      this.#tls = tls;
      return;
    }
    const next = this.#listen(tls);
    this.#tls = tls;
    this.#server = next;
    this.#ready = Promise.withResolvers<number>();
    this.#ready.resolve(next.addr.port);
    this.#swapped.resolve();
    this.#retired.set(current.addr.port, current);
    this.#closeIfUnused(current.addr.port);
  }

  attach(key: number, client: Tracked, port: number): void {
    client.internalPort = port;
    this.clients.set(key, client);
  }

  detach(key: number): void {
    const port = this.clients.get(key)?.internalPort;
    this.clients.delete(key);
    if (port !== undefined) this.#closeIfUnused(port);
  }

  #closeIfUnused(port: number): void {
    const server = this.#retired.get(port);
    if (server === undefined) return;
    for (const client of this.clients.values()) {
      if (client.internalPort === port) return;
    }
    this.#retired.delete(port);
    const draining = server.shutdown().catch(() => {});
    this.#draining.add(draining);
    draining.finally(() => this.#draining.delete(draining));
  }

  #serve(
    req: Request,
    info: Deno.ServeHandlerInfo<Deno.NetAddr>,
  ): Response | Promise<Response> {
    const client = this.clients.get(info.remoteAddr.port);
    // Not from the guard: someone found the internal port. Serve nothing.
    if (!client) return new Response(null, { status: 421 });
    // Under TLS the guard cannot see the head end: a request is the proof.
    client.headDeadline = undefined;
    const remoteAddr = client.conn.remoteAddr as Deno.NetAddr;
    return this.#handler(req, { ...info, remoteAddr });
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    this.#swapped.resolve();
    const servers = [this.#server, ...this.#retired.values()];
    this.#retired.clear();
    await Promise.all(
      servers.map((server) => server?.shutdown().catch(() => {})),
    );
    await Promise.all([...this.#draining]);
    await this.#loop;
  }
}

function answerError(error: unknown): Response {
  log.error(`Cannot answer a request: ${oneLine(error)}`);
  return new Response("Internal Server Error", { status: 500 });
}
