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
import { captureLog, waitFor, withinGuard } from "../support/helpers.ts";
import { ManualClock } from "../support/manual_clock.ts";

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

/**
 * Resolves once the server closes `conn` (reads and drops what it sends); a
 * reset (a TLS peer gone without close_notify) is a close too. Fails a hang.
 */
async function closedByServer(conn: Deno.Conn): Promise<void> {
  const buffer = new Uint8Array(4096);
  const drained = (async () => {
    try {
      while (await conn.read(buffer) !== null) { /* drop */ }
    } catch {
      // A reset.
    }
  })();
  try {
    await withinGuard(drained, "the server closing the connection", 10_000);
  } finally {
    try {
      conn.close();
    } catch {
      // Already closed.
    }
  }
}

/**
 * Once this returns, every connection opened before it is tracked, its
 * deadlines taken from the guard's clock: the guard accepts in the kernel's
 * (FIFO) order and tracks a connection before it accepts the next, so a later
 * connection answered means the earlier ones were accepted.
 */
async function acceptedSoFar(server: GuardedServer): Promise<void> {
  using probe = await connect(server);
  assert.match(await roundTrip(probe), /^HTTP\/1\.1 200 /);
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

Deno.test("a half-sent request head is closed after the header timeout, not before", async () => {
  const clock = new ManualClock();
  await using server = start({ headerTimeoutMs: 500, clock });
  using early = await connect(server);
  const late = await connect(server);
  for (const conn of [early, late]) {
    await conn.write(encoder.encode("GET /health HTTP/1.1\r\nHost: x\r\n"));
  }
  await acceptedSoFar(server);
  await clock.advance(499);
  assert.match(await roundTrip(early, "\r\n"), /^HTTP\/1\.1 200 /);
  await clock.advance(1_000);
  await closedByServer(late);
  // The answered one is past its header deadline for good.
  assert.match(await roundTrip(early), /^HTTP\/1\.1 200 /);
});

Deno.test("a connection that sends nothing is closed after the header timeout, not before", async () => {
  const clock = new ManualClock();
  await using server = start({ headerTimeoutMs: 300, clock });
  using early = await connect(server);
  const late = await connect(server);
  await acceptedSoFar(server);
  await clock.advance(299);
  assert.match(await roundTrip(early), /^HTTP\/1\.1 200 /);
  await clock.advance(1_000);
  await closedByServer(late);
});

Deno.test("the header timeout does not apply once the first head has arrived", async () => {
  const clock = new ManualClock();
  await using server = start({ headerTimeoutMs: 300, clock });
  using conn = await connect(server);
  assert.match(await roundTrip(conn), /^HTTP\/1\.1 200 /);
  await clock.advance(700);
  assert.match(await roundTrip(conn), /^HTTP\/1\.1 200 /);
});

Deno.test("the idle timeout closes a keep-alive connection; a byte either way starts it again", async () => {
  const clock = new ManualClock();
  await using server = start({ idleTimeoutMs: 600, clock });
  using busy = await connect(server);
  const idle = await connect(server);
  for (const conn of [busy, idle]) {
    assert.match(await roundTrip(conn), /^HTTP\/1\.1 200 /);
  }
  await clock.advance(600);
  assert.match(await roundTrip(busy), /^HTTP\/1\.1 200 /);
  await clock.advance(100);
  await closedByServer(idle);
  assert.match(await roundTrip(busy), /^HTTP\/1\.1 200 /);
});

Deno.test("connection number max + 1 is closed at once while the others stay open", async () => {
  // The clock never moves: no deadline can close anything here.
  await using server = start({ maxConnections: 3, clock: new ManualClock() });
  const held = await Promise.all([1, 2, 3].map(() => connect(server)));
  try {
    await closedByServer(await connect(server));
    const first = held[0] as Deno.TcpConn;
    assert.match(await roundTrip(first), /^HTTP\/1\.1 200 /);
    // Once one leaves, a newcomer is served (when the guard has seen it leave).
    first.close();
    held.shift();
    await waitFor(async () => {
      using again = await connect(server);
      return await roundTrip(again).then((r) => r.startsWith("HTTP/1.1 200 "))
        .catch(() => false);
    }, "a newcomer served once a held connection left");
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
    const clock = new ManualClock();
    await using server = start({
      tls: { cert: m.serverCrt, key: m.serverKey },
      headerTimeoutMs: 500,
      handler: () => new Response("over tls"),
      clock,
    });
    using client = Deno.createHttpClient({ caCerts: [m.caCrt] });
    const served = (via = client) =>
      fetch(`https://localhost:${server.addr.port}/health`, { client: via })
        .then(async (r) => `${r.status} ${await r.text()}`);
    assert.equal(await served(), "200 over tls");
    // A client that completes the handshake but not the head is shed.
    const tls = await Deno.connectTls({
      hostname: "localhost",
      port: server.addr.port,
      caCerts: [m.caCrt],
    });
    await tls.handshake();
    await tls.write(encoder.encode("GET /health HTTP/1.1\r\n"));
    // A client that opens TCP and never starts the handshake is shed.
    const tcp = await connect(server);
    // Answered on a new connection (a new client's pool): both were accepted.
    using probe = Deno.createHttpClient({ caCerts: [m.caCrt] });
    assert.equal(await served(probe), "200 over tls");
    await clock.advance(1_000);
    await closedByServer(tls);
    await closedByServer(tcp);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("shutdown closes held connections and frees the port", async () => {
  const server = start();
  const port = server.addr.port;
  const conn = await connect(server);
  await acceptedSoFar(server);
  const closed = closedByServer(conn);
  await server.shutdown();
  await closed;
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
