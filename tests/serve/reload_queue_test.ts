/** Reloads one at a time, coalesced (src/serve/reload_queue.ts). */
import assert from "node:assert/strict";
import { Registry } from "../../src/catalogue.ts";
import {
  reloadDeadline,
  ReloadQueue,
  STOPPING,
} from "../../src/serve/reload_queue.ts";

/** A queue whose reloads finish when the test says, recording what overlaps. */
function controlled() {
  let running = 0;
  let most = 0;
  const releases: (() => void)[] = [];
  let runs = 0;
  const queue = new ReloadQueue<number>(async () => {
    const n = ++runs;
    running++;
    most = Math.max(most, running);
    await new Promise<void>((resolve) => releases.push(resolve));
    running--;
    return n;
  }, () => -1);
  return {
    queue,
    get runs() {
      return runs;
    },
    get most() {
      return most;
    },
    async release(): Promise<void> {
      // Let the queued callback begin before releasing it.
      while (releases.length === 0) await new Promise((r) => setTimeout(r, 1));
      releases.shift()!();
    },
  };
}

Deno.test("requests before open() wait for it and are one reload", async () => {
  const c = controlled();
  const a = c.queue.request();
  const b = c.queue.request();
  await new Promise((r) => setTimeout(r, 10));
  assert.equal(c.runs, 0, "nothing runs before open()");
  c.queue.open();
  await c.release();
  assert.equal(await a, 1);
  assert.equal(await b, 1);
  assert.equal(c.runs, 1);
});

Deno.test("requests during a reload run one more after it, never at once", async () => {
  const c = controlled();
  c.queue.open();
  const first = c.queue.request();
  await new Promise((r) => setTimeout(r, 5));
  assert.equal(c.runs, 1);
  const more = [c.queue.request(), c.queue.request(), c.queue.request()];
  await c.release();
  assert.equal(await first, 1);
  await c.release();
  assert.deepEqual(await Promise.all(more), [2, 2, 2]);
  assert.equal(c.runs, 2);
  assert.equal(c.most, 1, "never two at once");
  await c.queue.close();
});

Deno.test("close(): a waiting request gets the skip result, the running one finishes", async () => {
  const c = controlled();
  c.queue.open();
  const first = c.queue.request();
  await new Promise((r) => setTimeout(r, 5));
  const waiting = c.queue.request();
  c.queue.close();
  await c.release();
  assert.equal(await first, 1);
  assert.equal(await waiting, -1);
  assert.equal(await c.queue.request(), -1);
  assert.equal(c.runs, 1);
});

Deno.test("a reload's read that does not finish within its deadline is refused in one line; a stop ends it at once", async () => {
  const text = "models:\n  a: { verb: chat, hub: o/a }\n";
  const timers = new Set<ReturnType<typeof setInterval>>();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => {
      let timer: ReturnType<typeof setInterval>;
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          // A byte every 100 ms: never silent, never done.
          timer = setInterval(
            () => controller.enqueue(new Uint8Array([32])),
            100,
          );
          timers.add(timer);
        },
        cancel() {
          clearInterval(timer);
          timers.delete(timer);
        },
      });
      return new Response(body);
    },
  );
  const url = `http://127.0.0.1:${server.addr.port}/c.yaml`;
  try {
    const stop = new AbortController();
    {
      using deadline = reloadDeadline(stop.signal, 500);
      await assert.rejects(
        Registry.load(url, { signal: deadline.signal }),
        (error: Error) => {
          assert.equal(
            error.message,
            `Cannot load catalogue ${url}: no complete read within 0.5 s (expected the catalogue read and parsed in time; the running engines are kept)`,
          );
          return true;
        },
      );
    }
    {
      using deadline = reloadDeadline(stop.signal, 30_000);
      setTimeout(() => stop.abort(STOPPING), 200);
      await assert.rejects(
        Registry.load(url, { signal: deadline.signal }),
        /the launcher is stopping/,
      );
    }
    assert.ok(text);
  } finally {
    for (const timer of timers) clearInterval(timer);
    await server.shutdown();
  }
});
