/**
 * The connection-guard phase (issue 11): the bare server's handler behind the
 * connection guard against the same handler bare, and the launcher's
 * `/health` while 1,000 idle connections are held against without.
 *
 * @module
 */
import { freePorts } from "../../tests/support/helpers.ts";
import { compare } from "../load/compare.ts";
import { spawnBaseline, spawnLauncher, waitHealthy } from "../servers/spawn.ts";
import {
  type Bench,
  C8,
  engineNames,
  HOST,
  pick,
  PLAN,
  progress,
  type Runs,
  url,
} from "../plan.ts";

/** Idle connections held open during the flooded runs. */
export const IDLE_FLOOD = 1_000;

/** Guarded ÷ bare `/health`, and the launcher's `/health` with 1,000 idle connections held ÷ without. */
export interface GuardResults {
  /** Keys `bare`, `guarded`. */
  guard: Runs;
  /** Keys `quiet`, `flooded`. */
  flood: Runs;
}

/** Runs `run` while `IDLE_FLOOD` idle connections to `port` are held. */
async function withIdleFlood<T>(
  port: number,
  run: () => Promise<T>,
): Promise<T> {
  const conns: Deno.TcpConn[] = [];
  try {
    for (let i = 0; i < IDLE_FLOOD; i++) {
      conns.push(await Deno.connect({ hostname: HOST, port }));
    }
    return await run();
  } finally {
    for (const conn of conns) conn.close();
  }
}

/** Bare vs guarded in rotating rounds; then quiet and flooded rounds alternating. */
export async function guardPhase(bench: Bench): Promise<GuardResults> {
  await using stack = new AsyncDisposableStack();
  const base = freePorts(4);
  const bare = spawnBaseline(stack, base);
  const guarded = spawnBaseline(stack, base + 1, undefined, true);
  const l1 = await spawnLauncher(bench, stack, engineNames(1), base + 2);
  await bare.waitForLine(/listening on /);
  await guarded.waitForLine(/listening on /);
  await waitHealthy(bench, l1, base + 2, engineNames(1));
  progress(
    `GET /health: bare vs guarded bare server, c=8; ${PLAN.guardRounds} rotating ${PLAN.guardSeconds} s rounds`,
  );
  const guard = await compare(
    bench,
    {
      bare: { url: url(base, "/health"), child: bare },
      guarded: { url: url(base + 1, "/health"), child: guarded },
    },
    C8,
    PLAN.guardRounds,
    PLAN.guardSeconds,
  );
  progress(
    `GET /health on the launcher with and without ${IDLE_FLOOD} idle connections`,
  );
  const target = { url: url(base + 2, "/health"), child: l1 };
  const flood: Runs = { quiet: [], flooded: [] };
  for (let round = 0; round < PLAN.guardRounds; round++) {
    const quiet = await compare(
      bench,
      { quiet: target },
      C8,
      1,
      PLAN.guardSeconds,
    );
    const flooded = await withIdleFlood(
      base + 2,
      () => compare(bench, { flooded: target }, C8, 1, PLAN.guardSeconds),
    );
    pick(flood, "quiet").push(...pick(quiet, "quiet"));
    pick(flood, "flooded").push(...pick(flooded, "flooded"));
  }
  return { guard, flood };
}
