/**
 * The start phase: spawn → "listening on", spawn → first `/health` answer
 * and SIGTERM → exit of the bare server and of launchers with 1 and 32
 * engines, once with the stand-in Deno engines and once with sleep-like
 * engines (`exec sleep 600`) that cost no CPU, to separate the launcher's own
 * start-up cost from 32 Deno processes booting at once on a small machine.
 *
 * @module
 */
import { freePorts } from "../../tests/support/helpers.ts";
import {
  firstAnswer,
  spawnBaseline,
  spawnLauncher,
  waitHealthy,
} from "../servers/spawn.ts";
import { type Bench, engineNames, MANY, PLAN, progress } from "../plan.ts";

/** Start and stop timings of one process, in milliseconds. */
export interface StartStop {
  listen: number;
  answer: number;
  stop: number;
}

/** Samples per server kind. */
export interface StartResults {
  bare: StartStop[];
  one: StartStop[];
  many: StartStop[];
  /** Launchers whose engines are `exec sleep 600`. */
  sleepOne: StartStop[];
  sleepMany: StartStop[];
}

/**
 * One start-to-listening and SIGTERM-to-exit sample; `models` undefined for
 * the bare server. With stand-in engines the stop waits until every engine
 * is healthy; sleep-like engines never are, so it follows the first answer.
 */
async function startStop(
  bench: Bench,
  models: readonly string[] | undefined,
  sleepLike = false,
): Promise<StartStop> {
  await using stack = new AsyncDisposableStack();
  const port = freePorts(models?.length ?? 0);
  const child = models
    ? await spawnLauncher(
      bench,
      stack,
      models,
      port,
      sleepLike ? { bin: bench.sleepBin } : {},
    )
    : spawnBaseline(stack, port);
  const [line, answer] = await Promise.all([
    child.waitForLine(/listening on /),
    firstAnswer(bench, child, port),
  ]);
  // Stop only once every engine is up: the well-behaved case.
  if (models && !sleepLike) await waitHealthy(bench, child, port, models);
  const stop = await child.stop("SIGTERM");
  if (stop.forced || (models && !stop.status.success)) {
    throw new Error(
      `${child.name} did not stop cleanly on SIGTERM (code ${stop.status.code}):\n${child.tail()}`,
    );
  }
  return { listen: line.at - child.spawnedAt, answer, stop: stop.ms };
}

/** Every sample, kinds interleaved so drift hits them alike. */
export async function startPhase(bench: Bench): Promise<StartResults> {
  const out: StartResults = {
    bare: [],
    one: [],
    many: [],
    sleepOne: [],
    sleepMany: [],
  };
  // Unmeasured starts first, so every measured one finds warm caches.
  await startStop(bench, undefined);
  await startStop(bench, engineNames(1));
  await startStop(bench, engineNames(1), true);
  for (let rep = 1; rep <= PLAN.startReps; rep++) {
    progress(
      `start/stop ${rep}/${PLAN.startReps}: bare server, 1 engine, 1 sleep-like engine`,
    );
    out.bare.push(await startStop(bench, undefined));
    out.one.push(await startStop(bench, engineNames(1)));
    out.sleepOne.push(await startStop(bench, engineNames(1), true));
  }
  for (let rep = 1; rep <= PLAN.startRepsMany; rep++) {
    progress(
      `start/stop ${rep}/${PLAN.startRepsMany}: ${MANY} engines, ${MANY} sleep-like engines`,
    );
    out.many.push(await startStop(bench, engineNames(MANY)));
    out.sleepMany.push(await startStop(bench, engineNames(MANY), true));
  }
  return out;
}
