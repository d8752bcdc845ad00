/**
 * A second baseline for `deno task bench`: the least `GET /models` can do, a
 * bare `Deno.serve` that fetches every engine's `/health` at once (2 s
 * timeout each) and answers with who is healthy. Usage:
 * `deno run --allow-net bench/servers/fanout_server.ts PORT ENGINE_PORT...`.
 *
 * It prints `listening on http://127.0.0.1:PORT` on stderr once it listens.
 *
 * @module
 */

const [port, ...enginePorts] = Deno.args.map(Number);

async function healthy(enginePort: number): Promise<boolean> {
  try {
    const response = await fetch(`http://127.0.0.1:${enginePort}/health`, {
      signal: AbortSignal.timeout(2_000),
    });
    await response.body?.cancel();
    return response.status === 200;
  } catch {
    return false;
  }
}

async function handler(): Promise<Response> {
  const results = await Promise.all(enginePorts.map(healthy));
  const active: Record<string, { healthy: boolean }> = {};
  enginePorts.forEach((p, i) => {
    active[String(p)] = { healthy: results[i] === true };
  });
  return Response.json({ active });
}

Deno.serve({
  hostname: "127.0.0.1",
  port: port ?? 0,
  onListen(addr) {
    console.error(`listening on http://127.0.0.1:${addr.port}`);
  },
}, handler);
