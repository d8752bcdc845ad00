/**
 * LogThrottle with a clock moved by hand, and the throttled 401 log of
 * AuthMiddleware: one line per reason per window, then the count of the rest,
 * while the failure counters count every refusal.
 */
import assert from "node:assert/strict";
import { captureLog } from "../support/helpers.ts";
import { LogThrottle } from "../../src/common/log_throttle.ts";
import type { Clock } from "../../src/common/sleep.ts";
import { AuthMiddleware } from "../../src/web.ts";
import { AUTH_FAILURE_REASONS } from "../../src/web/auth_failures.ts";

/** A clock whose time only moves when the test says so. */
class ManualClock implements Clock {
  time = 0;
  #timers: { at: number; callback: () => void; live: boolean }[] = [];

  now(): number {
    return this.time;
  }

  wall(): number {
    return this.time;
  }

  schedule(callback: () => void, ms: number): () => void {
    const timer = { at: this.time + ms, callback, live: true };
    this.#timers.push(timer);
    return () => {
      timer.live = false;
    };
  }

  advance(ms: number): void {
    this.time += ms;
    const due = this.#timers.filter((t) => t.live && t.at <= this.time);
    this.#timers = this.#timers.filter((t) => !due.includes(t));
    for (const timer of due) {
      timer.live = false;
      timer.callback();
    }
  }
}

function throttle(clock: ManualClock) {
  const lines: string[] = [];
  const t = new LogThrottle({
    write: (line) => lines.push(line),
    clock,
  });
  return { t, lines };
}

Deno.test("LogThrottle writes the first line of a window, counts the rest, and says how many at the window's end", () => {
  const clock = new ManualClock();
  const { t, lines } = throttle(clock);
  assert.equal(t.hit("401 missing", () => "first"), true);
  let built = 0;
  for (let i = 0; i < 4_211; i++) {
    t.hit("401 missing", () => `line ${++built}`);
  }
  assert.equal(built, 0, "suppressed lines are never built");
  assert.deepEqual(lines, ["first"]);
  clock.advance(9_999);
  assert.deepEqual(lines, ["first"]);
  clock.advance(1);
  assert.deepEqual(lines, ["first", "401 missing: … and 4,211 more in 10 s"]);
  assert.equal(t.hit("401 missing", () => "next window"), true);
  assert.equal(lines.at(-1), "next window");
});

Deno.test("LogThrottle keeps one window per key, and no summary when nothing was suppressed", () => {
  const clock = new ManualClock();
  const { t, lines } = throttle(clock);
  t.hit("a", () => "a1");
  t.hit("b", () => "b1");
  t.hit("a", () => "a2");
  clock.advance(10_000);
  assert.deepEqual(lines, ["a1", "b1", "a: … and 1 more in 10 s"]);
});

Deno.test("LogThrottle closes a window whose timer is late, and flush() writes pending summaries", () => {
  const clock = new ManualClock();
  const { t, lines } = throttle(clock);
  t.hit("k", () => "k1");
  t.hit("k", () => "k2");
  clock.time += 10_000; // the time passes, the timer has not fired yet
  t.hit("k", () => "k3");
  assert.deepEqual(lines, ["k1", "k: … and 1 more in 10 s", "k3"]);
  t.hit("k", () => "k4");
  t.flush();
  assert.equal(lines.at(-1), "k: … and 1 more in 10 s");
  clock.advance(20_000);
  assert.equal(lines.length, 4, "the cancelled timer wrote nothing");
});

const SECRET = "throttle-test-secret-".repeat(4);
const ISSUER = "https://idp.example";

Deno.test("AuthMiddleware counts every refusal by reason and logs one line per reason in 10 s", async () => {
  const auth = new AuthMiddleware({ secret: SECRET, issuer: ISSUER });
  const handler = auth.wrap(() => new Response("ok"));
  assert.deepEqual(
    Object.keys(auth.failures),
    [...AUTH_FAILURE_REASONS],
  );
  assert.ok(Object.isFrozen(auth.failures));
  const requests: [RequestInit, string][] = [
    [{}, "missing"],
    [{ headers: { authorization: "Basic dXNlcjpwdw==" } }, "missing"],
    [{ headers: { authorization: "Bearer a.b" } }, "malformed"],
    [{ headers: { authorization: "Bearer a+b.c.d" } }, "malformed"],
    [{
      headers: {
        authorization:
          "Bearer eyJhbGciOiJub25lIn0.eyJpc3MiOiJ4In0.c2lnbmF0dXJl",
      },
    }, "signature"],
  ];
  const { lines } = await captureLog(async () => {
    for (let round = 0; round < 50; round++) {
      for (const [init] of requests) {
        const response = await handler(
          new Request("http://localhost/health", init),
        );
        assert.equal(response.status, 401);
        await response.body?.cancel();
      }
    }
  });
  assert.deepEqual(auth.failures, {
    missing: 100,
    malformed: 100,
    signature: 50,
    expired: 0,
    claims: 0,
    other: 0,
  });
  const warnings = lines.filter((l) => l.startsWith("warn: 401"));
  assert.equal(warnings.length, 3, warnings.join("\n"));
  assert.match(warnings[0] ?? "", /GET \/health: no Authorization header/);
  assert.match(warnings[2] ?? "", /alg none not allowed/);
});

Deno.test("the development middleware counts nothing", () => {
  const auth = AuthMiddleware.development();
  assert.deepEqual(Object.values(auth.failures), [0, 0, 0, 0, 0, 0]);
});
