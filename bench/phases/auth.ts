/**
 * The production-mode phase: `/health` at c=8 on a development launcher and
 * a production one (every request's token verified), and the security
 * headers' in-process cost.
 *
 * @module
 */
import { freePorts } from "../../tests/support/helpers.ts";
import type { Child } from "../servers/process.ts";
import {
  AUTH_ENV,
  type HeaderCost,
  measureHeaderCost,
  writeAuthScripts,
} from "../load/auth_load.ts";
import { compare } from "../load/compare.ts";
import { spawnLauncher, waitHealthy } from "../servers/spawn.ts";
import {
  type Bench,
  C8,
  engineNames,
  PLAN,
  progress,
  type Runs,
  sleep,
  url,
} from "../plan.ts";

/** Production ÷ development `/health` at c=8, and the headers' own cost. */
export interface AuthResults {
  /** Keys `dev`, `prod`. */
  runs: Runs;
  headers: HeaderCost;
}

/** Waits until `/health` answers 200 to a request with `token`. */
async function waitAuthorized(
  bench: Bench,
  child: Child,
  port: number,
  token: string,
): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!bench.signal.aborted && Date.now() < deadline) {
    try {
      const response = await fetch(url(port, "/health"), {
        client: bench.client,
        headers: { authorization: `Bearer ${token}` },
      });
      await response.body?.cancel();
      if (response.ok) return;
    } catch {
      // Not listening yet.
    }
    if (child.status) {
      throw new Error(`${child.name} exited:\n${child.tail()}`);
    }
    await sleep(50);
  }
  throw new Error(`${child.name} never accepted the bench token`);
}

/** Development vs production launchers, rotating rounds at c=8. */
export async function authPhase(bench: Bench): Promise<AuthResults> {
  await using stack = new AsyncDisposableStack();
  const scripts = await writeAuthScripts(bench.work);
  const base = freePorts(3);
  const one = engineNames(1);
  const dev = await spawnLauncher(bench, stack, one, base);
  const prod = await spawnLauncher(bench, stack, one, base + 2, {
    production: AUTH_ENV,
  });
  await waitHealthy(bench, dev, base, one);
  await waitAuthorized(bench, prod, base + 2, scripts.token);
  progress(
    `GET /health c=8: development, production; ${PLAN.authRounds} rotating ${PLAN.authSeconds} s rounds`,
  );
  const runs = await compare(
    bench,
    {
      dev: { url: url(base, "/health"), child: dev },
      prod: {
        url: url(base + 2, "/health"),
        child: prod,
        script: scripts.oneToken,
      },
    },
    C8,
    PLAN.authRounds,
    PLAN.authSeconds,
  );
  progress("security headers: in-process cost on /health");
  return { runs, headers: measureHeaderCost() };
}
