/**
 * The internal side of the connection guard: a `Deno.serve` on a random
 * loopback port that answers only connections the guard made (421 to anyone
 * else), sees each request with the real client's address, and is started
 * again, with a backoff, whenever it stops.
 *
 * @module
 */
import { FailureRun } from "../common/log_throttle.ts";

/** First wait before retrying a failed accept or a failed server; it doubles. */
export const FIRST_BACKOFF_MS = 10;
/** The longest such wait. */
export const MAX_BACKOFF_MS = 1_000;

/** Resolves after `ms`. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** An error's message, or the thrown value as text. */
export function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** One client connection's state, for the guard's sweep and for the internal server. */
export interface Tracked {
  conn: Deno.Conn;
  upstream: Deno.Conn | undefined;
  /** Before the head arrives: when it must have. After: undefined. */
  headDeadline: number | undefined;
  lastActive: number;
}

/** The internal `Deno.serve` on loopback, restarted when it fails. */
export class Internal {
  #handler: Deno.ServeHandler<Deno.NetAddr>;
  #onError: (error: unknown) => Response | Promise<Response>;
  /** Guard-side local port of each upstream connection → the real client's address. */
  readonly clients = new Map<number, Tracked>();
  #server: Deno.HttpServer<Deno.NetAddr> | undefined;
  #ready = Promise.withResolvers<number>();
  #stopping = false;
  #failures = new FailureRun("serve the internal HTTP server");
  readonly #loop: Promise<void>;

  #tls: { cert: string; key: string } | undefined;

  constructor(
    handler: Deno.ServeHandler<Deno.NetAddr>,
    onError: (error: unknown) => Response | Promise<Response>,
    tls: { cert: string; key: string } | undefined,
  ) {
    this.#tls = tls;
    this.#handler = handler;
    this.#onError = onError;
    this.#loop = this.#run();
  }

  /** The port to connect to (waits while the server restarts). */
  port(): Promise<number> {
    return this.#ready.promise;
  }

  async #run(): Promise<void> {
    let backoff = FIRST_BACKOFF_MS;
    while (!this.#stopping) {
      try {
        const server = Deno.serve({
          hostname: "127.0.0.1",
          port: 0,
          onListen: () => {},
          onError: this.#onError,
          ...(this.#tls ?? {}),
        }, (req, info) => this.#serve(req, info));
        this.#server = server;
        this.#ready.resolve(server.addr.port);
        this.#failures.ok();
        backoff = FIRST_BACKOFF_MS;
        await server.finished;
        if (this.#stopping) return;
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
    await this.#server?.shutdown().catch(() => {});
    await this.#loop;
  }
}
