/** Supervision options only an embedding program sets (in this process). */
import assert from "node:assert/strict";
import { Semioserve } from "../../mod.ts";
import {
  freePorts,
  inProcessSite,
  STAND_IN_CATALOGUE,
  waitFor,
} from "../support/helpers.ts";

Deno.test("a run that stayed up long enough after its first 200 resets the restart delay to 1 s", async () => {
  await using site = await inProcessSite();
  const root = site.root;
  const serve = new Semioserve({
    models: ["crash1"], // answers 200 at once, exits 3 after 1 s
    host: "127.0.0.1",
    port: freePorts(1),
    directory: root,
    catalogue: STAND_IN_CATALOGUE,
    dev_mode: true,
    handleSignals: false,
    healthIntervalMs: 100,
    stableAfterMs: 500,
    graceMs: 1_000,
  });
  const running = serve.run();
  try {
    await waitFor(
      () => (serve.engineViews()[0]?.restarts ?? 0) >= 2,
      "two restarts",
      10_000,
    );
    const log = await Deno.readTextFile(`${root}/logs/crash1.log`);
    const delays = [...log.matchAll(/restart (\d+) in (\d+) s/g)].map((m) =>
      Number(m[2])
    );
    assert.deepEqual(delays.slice(0, 2), [1, 1], log);
    const [view] = serve.engineViews();
    assert.equal(view?.policy, "on-failure");
    assert.equal(view?.name, "crash1");
    assert.ok(Object.isFrozen(view), "a view is read-only");
  } finally {
    await serve.stop();
    await running.catch(() => {});
  }
});
