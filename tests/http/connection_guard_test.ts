/**
 * The connection guard in process, over loopback: deadlines, the connection
 * limit, hand-on of bytes both ways, TLS, and errors that stay in one request.
 */
import assert from "node:assert/strict";
import {
  connectionRoom,
  type GuardedServeOptions,
  GuardedServer,
  RESERVED_FDS,
} from "../../src/http/connection_guard.ts";
import { SEMIOSERVE_DEFAULTS } from "../../src/serve/config.ts";
import { makeMaterial } from "../support/certs.ts";
import { captureLog } from "../support/helpers.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const GET = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";

function echoRemote(
  _req: Request,
  info: Deno.ServeHandlerInfo<Deno.NetAddr>,
): Response {
  return Response.json({
    hostname: info.remoteAddr.hostname,
    port: info.remoteAddr.port,
  });
}

function start(options: Partial<GuardedServeOptions> = {}): GuardedServer {
  const { headerTimeoutMs, idleTimeoutMs, maxConnections } =
    SEMIOSERVE_DEFAULTS;
  return new GuardedServer({
    hostname: "127.0.0.1",
    port: 0,
    handler: echoRemote,
    headerTimeoutMs,
    idleTimeoutMs,
    maxConnections,
    ...options,
  });
}

function connect(server: GuardedServer): Promise<Deno.TcpConn> {
  return Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
}

/** Milliseconds until the server closes `conn` (reads and drops what it sends). */
async function closedAfter(conn: Deno.Conn, limitMs: number): Promise<number> {
  const started = performance.now();
  const buffer = new Uint8Array(4096);
  let expired = false;
  const timer = setTimeout(() => {
    expired = true;
    conn.close();
  }, limitMs);
  try {
    while (await conn.read(buffer) !== null) { /* drop */ }
    return performance.now() - started;
  } catch {
    // A reset (a TLS peer gone without close_notify) is a close too; our own timer is not.
    return expired ? Infinity : performance.now() - started;
  } finally {
    clearTimeout(timer);
    try {
      conn.close();
    } catch {
      // Already closed.
    }
  }
}

/** Sends one request and reads one response (small, headers and body in one read). */
async function roundTrip(conn: Deno.Conn, request = GET): Promise<string> {
  await conn.write(encoder.encode(request));
  const buffer = new Uint8Array(16 * 1024);
  const n = await conn.read(buffer);
  assert.ok(n !== null, "the connection was closed instead of answered");
  return decoder.decode(buffer.subarray(0, n));
}

Deno.test("a request through the guard is answered with the client's real address", async () => {
  await using server = start();
  using conn = await connect(server);
  const response = await roundTrip(conn);
  assert.match(response, /^HTTP\/1\.1 200 /);
  const body = JSON.parse(response.slice(response.indexOf("\r\n\r\n") + 4));
  assert.deepEqual(body, {
    hostname: "127.0.0.1",
    port: conn.localAddr.port,
  });
});

Deno.test("a request head split over several writes, and its body, reach the handler", async () => {
  await using server = start({
    async handler(req) {
      return new Response(`${req.method} ${await req.text()}`);
    },
  });
  using conn = await connect(server);
  for (
    const part of ["POST / HTTP/1.1\r\nHost: x\r", "\nContent-Length: 5\r\n\r"]
  ) {
    await conn.write(encoder.encode(part));
    await new Promise((r) => setTimeout(r, 50));
  }
  const response = await roundTrip(conn, "\nhello");
  assert.match(response, /\r\n\r\nPOST hello$/);
});

Deno.test("a half-sent request head is closed after the header timeout", async () => {
  await using server = start({ headerTimeoutMs: 500 });
  const conn = await connect(server);
  await conn.write(encoder.encode("GET /health HTTP/1.1\r\nHost: x\r\n"));
  const ms = await closedAfter(conn, 5_000);
  assert.ok(ms >= 400 && ms < 2_000, `closed after ${ms} ms, expected ~500`);
});

Deno.test("a connection that sends nothing is closed after the header timeout", async () => {
  await using server = start({ headerTimeoutMs: 300 });
  const ms = await closedAfter(await connect(server), 5_000);
  assert.ok(ms >= 250 && ms < 2_000, `closed after ${ms} ms, expected ~300`);
});

Deno.test("the header timeout does not apply once the first head has arrived", async () => {
  await using server = start({ headerTimeoutMs: 300 });
  using conn = await connect(server);
  assert.match(await roundTrip(conn), /^HTTP\/1\.1 200 /);
  await new Promise((r) => setTimeout(r, 700));
  assert.match(await roundTrip(conn), /^HTTP\/1\.1 200 /);
});

Deno.test("the idle timeout closes a keep-alive connection", async () => {
  await using server = start({ idleTimeoutMs: 600 });
  const conn = await connect(server);
  assert.match(await roundTrip(conn), /^HTTP\/1\.1 200 /);
  const ms = await closedAfter(conn, 5_000);
  assert.ok(ms >= 450 && ms < 2_500, `closed after ${ms} ms, expected ~600`);
});

Deno.test("connection number max + 1 is closed at once while the others stay open", async () => {
  await using server = start({ maxConnections: 3, headerTimeoutMs: 10_000 });
  const held = await Promise.all([1, 2, 3].map(() => connect(server)));
  try {
    // The guard counts a connection once it has accepted it.
    await new Promise((r) => setTimeout(r, 100));
    const ms = await closedAfter(await connect(server), 3_000);
    assert.ok(
      ms < 1_000,
      `connection 4 closed after ${ms} ms, expected at once`,
    );
    const first = held[0] as Deno.TcpConn;
    assert.match(await roundTrip(first), /^HTTP\/1\.1 200 /);
    // Once one leaves, a newcomer is served.
    first.close();
    held.shift();
    await new Promise((r) => setTimeout(r, 100));
    using again = await connect(server);
    assert.match(await roundTrip(again), /^HTTP\/1\.1 200 /);
  } finally {
    for (const conn of held) conn.close();
  }
});

Deno.test("the connection limit is lowered to what the open-files limit leaves room for", async () => {
  assert.equal(connectionRoom(1024), Math.floor((1024 - RESERVED_FDS) / 3));
  assert.equal(connectionRoom(10), 1);
  const { result: server, lines } = await captureLog(() =>
    start({ maxConnections: 1024, openFilesLimit: 1024 })
  );
  await using _ = server;
  assert.equal(server.maxConnections, connectionRoom(1024));
  assert.equal(lines.length, 1);
  assert.match(lines[0] ?? "", /^warn: max connections 1024 lowered to 298/);
});

Deno.test("an exception in the handler is a 500 for that request and one log line", async () => {
  let calls = 0;
  const { lines } = await captureLog(async () => {
    await using server = start({
      handler() {
        if (++calls === 1) throw new Error("boom");
        return new Response("fine");
      },
    });
    using conn = await connect(server);
    assert.match(await roundTrip(conn), /^HTTP\/1\.1 500 /);
    assert.match(await roundTrip(conn), /^HTTP\/1\.1 200 [^]*fine$/);
  });
  assert.deepEqual(lines, ["error: Cannot answer a request: boom"]);
});

Deno.test("TLS through the guard: the handshake counts toward the header timeout, then requests are served", async () => {
  const dir = await Deno.makeTempDir({ prefix: "guard-tls-" });
  try {
    const m = await makeMaterial(dir);
    await using server = start({
      tls: { cert: m.serverCrt, key: m.serverKey },
      headerTimeoutMs: 500,
      handler: () => new Response("over tls"),
    });
    using client = Deno.createHttpClient({ caCerts: [m.caCrt] });
    const response = await fetch(
      `https://localhost:${server.addr.port}/health`,
      { client },
    );
    assert.equal(response.status, 200);
    assert.equal(await response.text(), "over tls");
    // A client that completes the handshake but not the head is shed.
    const tls = await Deno.connectTls({
      hostname: "localhost",
      port: server.addr.port,
      caCerts: [m.caCrt],
    });
    await tls.write(encoder.encode("GET /health HTTP/1.1\r\n"));
    const slow = await closedAfter(tls, 5_000);
    assert.ok(slow >= 400 && slow < 2_000, `closed after ${slow} ms`);
    // A client that opens TCP and never starts the handshake is shed.
    const ms = await closedAfter(await connect(server), 5_000);
    assert.ok(ms >= 400 && ms < 2_000, `closed after ${ms} ms, expected ~500`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("shutdown closes held connections and frees the port", async () => {
  const server = start();
  const port = server.addr.port;
  const conn = await connect(server);
  await new Promise((r) => setTimeout(r, 50));
  const closed = closedAfter(conn, 5_000);
  await server.shutdown();
  assert.ok(await closed < 2_000);
  await server.shutdown();
  Deno.listen({ hostname: "127.0.0.1", port }).close();
});

Deno.test("replaceTls on a plain HTTP guard is refused", async () => {
  await using server = start();
  assert.throws(
    () => server.replaceTls({ cert: "x", key: "y" }),
    /Cannot replace the TLS pair: the server serves plain HTTP/,
  );
});
