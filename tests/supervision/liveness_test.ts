/** Liveness as a state machine (src/supervision/liveness.ts): no processes, no timers. */
import assert from "node:assert/strict";
import { Liveness } from "../../src/supervision/liveness.ts";

Deno.test("a loading run is spared by failures; after its first 200, failures in a row stop it", () => {
  const liveness = new Liveness("m", {
    livenessFailures: 3,
    startTimeoutMs: 0,
  });
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
  const liveness = new Liveness("m", {
    livenessFailures: 6,
    startTimeoutMs: 1_000,
  });
  // Well inside the timeout: the clock moves on between this line and the check.
  assert.equal(liveness.silentLoad(Date.now() - 500), undefined);
  const stop = liveness.silentLoad(Date.now() - 5_000);
  assert.equal(stop?.kind, "stop");
  assert.equal(stop?.kind === "stop" && stop.reason, "start-timeout");
  assert.match(
    stop?.kind === "stop" ? stop.why : "",
    /wrote nothing for 5 s \(--start-timeout\)/,
  );
  liveness.observe({ ok: true }, true);
  assert.equal(
    liveness.silentLoad(Date.now() - 5_000),
    undefined,
    "loaded runs are liveness's",
  );
  const off = new Liveness("m", { livenessFailures: 6, startTimeoutMs: 0 });
  assert.equal(off.silentLoad(0), undefined, "0 turns it off");
});
