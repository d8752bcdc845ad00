/** Liveness and the hopeless streak as pure rules (src/supervision/restart_policy.ts): no processes, no timers. */
import assert from "node:assert/strict";
import {
  CauseStreak,
  pollVerdict,
  type RunHealth,
  silenceVerdict,
  type Verdict,
} from "../../src/supervision/restart_policy.ts";

/** A run's polls in order, its facts carried from one to the next. */
function polls(limit: number) {
  let health: RunHealth = { firstOkAt: undefined, failures: 0 };
  return {
    observe(result: { ok: boolean }, counts: boolean): Verdict {
      const [verdict, next] = pollVerdict(health, result.ok, counts, limit);
      health = next;
      return verdict;
    },
    reset(): void {
      health = { firstOkAt: undefined, failures: 0 };
    },
    get firstOkAt(): number | undefined {
      return health.firstOkAt;
    },
  };
}

Deno.test("a loading run is spared by failures; after its first 200, failures in a row stop it", () => {
  const liveness = polls(3);
  for (let i = 0; i < 10; i++) {
    assert.deepEqual(liveness.observe({ ok: false }, true), {
      kind: "loading",
    });
  }
  assert.deepEqual(liveness.observe({ ok: true }, true), {
    kind: "ready",
    first: true,
  });
  assert.deepEqual(liveness.observe({ ok: true }, true), {
    kind: "ready",
    first: false,
  });
  assert.equal(liveness.observe({ ok: false }, true).kind, "unhealthy");
  assert.equal(
    liveness.observe({ ok: false }, false).kind,
    "unhealthy",
    "a request's poll does not count",
  );
  assert.equal(liveness.observe({ ok: false }, true).kind, "unhealthy");
  const stop = liveness.observe({ ok: false }, true);
  assert.equal(stop.kind, "stop");
  assert.equal(stop.kind === "stop" && stop.reason, "unhealthy");
  liveness.reset();
  assert.deepEqual(
    liveness.observe({ ok: false }, true),
    { kind: "loading" },
    "a new run loads again",
  );
});

Deno.test("a loading run silent past --start-timeout is stopped; output or a first 200 spares it", () => {
  const liveness = polls(6);
  const silentLoad = (last: number) =>
    silenceVerdict(liveness.firstOkAt, last, 1_000, null);
  // Well inside the timeout: the clock moves on between this line and the check.
  assert.equal(silentLoad(performance.now() - 500), undefined);
  const stop = silentLoad(performance.now() - 5_000);
  assert.equal(stop?.kind, "stop");
  assert.equal(stop?.kind === "stop" && stop.reason, "start-timeout");
  assert.match(
    stop?.kind === "stop" ? stop.why : "",
    /wrote nothing for 5 s \(--start-timeout\)/,
  );
  liveness.observe({ ok: true }, true);
  assert.equal(
    silentLoad(performance.now() - 5_000),
    undefined,
    "loaded runs are liveness's",
  );
  assert.equal(
    silenceVerdict(undefined, 0, 0, null),
    undefined,
    "0 turns it off",
  );
});

Deno.test("the hopeless streak counts only runs that never answered 200", () => {
  const streak = new CauseStreak();
  assert.equal(streak.next("model-not-found", true), "grow");
  assert.equal(streak.next("model-not-found", true), "grow");
  assert.equal(streak.next("model-not-found"), "grow");
  assert.equal(streak.next("model-not-found", true), "grow");
  assert.equal(streak.next("model-not-found"), "grow");
  assert.equal(streak.next("model-not-found"), "failed");
});
