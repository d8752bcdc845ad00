/**
 * The load phase: throughput, latency and memory with every server up at
 * once: two bare servers, launchers with 1, 8 and 32 engines, 1-engine
 * launchers with a smaller V8 young generation, a launcher with a hung
 * engine, and bare fan-out servers polling the same engines.
 *
 * @module
 */
import { freePorts } from "../../tests/support/helpers.ts";
import { Child } from "../servers/process.ts";
import { runWrk, type WrkResult } from "../load/wrk.ts";
import { compare } from "../load/compare.ts";
import {
  mib,
  spawnBaseline,
  spawnLauncher,
  stopCleanly,
  waitHealthy,
} from "../servers/spawn.ts";
import {
  type Bench,
  C1,
  C8,
  engineNames,
  MANY,
  PLAN,
  progress,
  type Runs,
  type Target,
  url,
} from "../plan.ts";

/**
 * 1-engine launchers started with `--v8-flags`: a smaller semi-space (young
 * generation) trades GC work for memory. Keys name them in results.
 */
export const SEMI_SPACE = [
  { key: "semi2", flags: "--max-semi-space-size=2" },
  { key: "semi1", flags: "--max-semi-space-size=1" },
] as const;

/** A key of {@linkcode SEMI_SPACE}. */
export type SemiKey = (typeof SEMI_SPACE)[number]["key"];

/** VmRSS in MiB of each server process (engines excluded). */
export type Rss = Record<"bare" | "one" | "many" | "floor" | SemiKey, number>;

const FLOOR = new URL("../servers/import_floor.ts", import.meta.url).pathname;

/** What the load phase measured. */
export interface LoadResults {
  /** Keys `bare`, `bare2`, `one` and the {@linkcode SEMI_SPACE} keys. */
  health: { c1: Runs; c8: Runs };
  /**
   * Keys `1`, `8`, `32` (launchers), the {@linkcode SEMI_SPACE} keys, and at
   * c=1 `fan1`, `fan32` (fan-out servers).
   */
  models: { c1: Runs; c8: Runs };
  hung: WrkResult;
  /** Idle: every engine healthy, before any load. Loaded: after all of it. */
  rss: { idle: Rss; loaded: Rss };
}

/** Consecutive port blocks: a server's port, then its engines' ports. */
function portBlocks<K extends string>(
  sizes: Record<K, number>,
): Record<K, number> {
  const total = Object.values<number>(sizes).reduce((a, b) => a + b, 0);
  let next = freePorts(total);
  const out = {} as Record<K, number>;
  for (const key of Object.keys(sizes) as K[]) {
    out[key] = next;
    next += sizes[key];
  }
  return out;
}

/** Throughput, latency and memory under load, every server up at once. */
export async function loadPhase(bench: Bench): Promise<LoadResults> {
  await using stack = new AsyncDisposableStack();
  const ports = portBlocks({
    bare: 1,
    bare2: 1,
    fan1: 1,
    fanMany: 1,
    one: 2,
    semi2: 2,
    semi1: 2,
    eight: 9,
    many: MANY + 1,
    hung: 3,
  });
  const one = engineNames(1);
  const eight = engineNames(8);
  const many = engineNames(MANY);

  progress(
    "starting two bare servers, a 1-engine launcher and two with a smaller young generation",
  );
  const bare = spawnBaseline(stack, ports.bare);
  const bare2 = spawnBaseline(stack, ports.bare2);
  const l1 = await spawnLauncher(bench, stack, one, ports.one);
  const semi: Record<string, Target> = {};
  for (const { key, flags } of SEMI_SPACE) {
    const child = await spawnLauncher(bench, stack, one, ports[key], {
      v8Flags: flags,
    });
    semi[key] = { url: url(ports[key], ""), child };
  }
  const floor = stack.use(
    new Child("modules only", Deno.execPath(), [
      "run",
      "-A",
      "--quiet",
      `--v8-flags=${SEMI_SPACE[0].flags}`,
      FLOOR,
    ], { NO_COLOR: "1" }),
  );
  await bare.waitForLine(/listening on /);
  await bare2.waitForLine(/listening on /);
  await floor.waitForLine(/listening on /);
  await waitHealthy(bench, l1, ports.one, one);
  for (const { key } of SEMI_SPACE) {
    const target = semi[key] as Target;
    await waitHealthy(bench, target.child, ports[key], one);
  }
  const idle: Rss = {
    bare: mib(bare),
    one: mib(l1),
    floor: mib(floor),
    many: Number.NaN,
    semi2: Number.NaN,
    semi1: Number.NaN,
  };
  for (const { key } of SEMI_SPACE) {
    idle[key] = mib((semi[key] as Target).child);
  }

  /** The semi-space launchers as targets on `path`. */
  function semiOn(path: string): Record<string, Target> {
    return Object.fromEntries(
      Object.entries(semi).map(([key, t]) => [key, {
        url: `${t.url}${path}`,
        child: t.child,
      }]),
    );
  }

  progress(
    `GET /health: bare, bare #2, launchers; ${PLAN.healthRounds} rotating ${PLAN.healthSeconds} s rounds`,
  );
  const healthTargets = {
    bare: { url: url(ports.bare, "/health"), child: bare },
    bare2: { url: url(ports.bare2, "/health"), child: bare2 },
    one: { url: url(ports.one, "/health"), child: l1 },
    ...semiOn("/health"),
  };
  const { healthRounds: hr, healthSeconds: hs } = PLAN;
  const health = {
    c1: await compare(bench, healthTargets, C1, hr, hs),
    c8: await compare(bench, healthTargets, C8, hr, hs),
  };

  progress(`starting 8-, ${MANY}-engine and hung-engine launchers`);
  const l8 = await spawnLauncher(bench, stack, eight, ports.eight);
  const lMany = await spawnLauncher(bench, stack, many, ports.many);
  const lHung = await spawnLauncher(bench, stack, ["e01", "hung"], ports.hung);
  await Promise.all([
    waitHealthy(bench, l8, ports.eight, eight),
    waitHealthy(bench, lMany, ports.many, many),
    waitHealthy(bench, lHung, ports.hung, ["e01"]),
  ]);
  idle.many = mib(lMany);
  // The fan-out baselines poll the very engines of the 1- and 32-engine launchers.
  const fan1 = spawnBaseline(stack, ports.fan1, [ports.one + 1]);
  const fanMany = spawnBaseline(
    stack,
    ports.fanMany,
    many.map((_, i) => ports.many + 1 + i),
  );
  await fan1.waitForLine(/listening on /);
  await fanMany.waitForLine(/listening on /);

  progress(
    `GET /models: 1, 8, ${MANY} engines, smaller young generations and fan-outs; ${PLAN.modelsRounds} rotating ${PLAN.modelsSeconds} s rounds`,
  );
  const launchers = {
    "1": { url: url(ports.one, "/models"), child: l1 },
    "8": { url: url(ports.eight, "/models"), child: l8 },
    [String(MANY)]: { url: url(ports.many, "/models"), child: lMany },
    ...semiOn("/models"),
  };
  const fanOuts = {
    fan1: { url: url(ports.fan1, "/models"), child: fan1 },
    [`fan${MANY}`]: { url: url(ports.fanMany, "/models"), child: fanMany },
  };
  const { modelsRounds: mr, modelsSeconds: ms } = PLAN;
  const models = {
    c1: await compare(bench, { ...launchers, ...fanOuts }, C1, mr, ms),
    c8: await compare(bench, launchers, C8, mr, ms),
  };
  const loaded: Rss = {
    bare: mib(bare),
    one: mib(l1),
    floor: mib(floor),
    many: mib(lMany),
    semi2: Number.NaN,
    semi1: Number.NaN,
  };
  for (const { key } of SEMI_SPACE) {
    loaded[key] = mib((semi[key] as Target).child);
  }

  progress(`GET /models with a hung engine: ${PLAN.hungSeconds} s at c=1`);
  const hung = await runWrk(bench.script, {
    url: url(ports.hung, "/models"),
    ...C1,
    seconds: PLAN.hungSeconds,
    timeoutSeconds: PLAN.hungTimeoutSeconds,
    signal: bench.signal,
  });

  progress("stopping the load-phase servers");
  await stopCleanly([
    l1,
    ...Object.values(semi).map((t) => t.child),
    l8,
    lMany,
    lHung,
  ]);
  return { health, models, hung, rss: { idle, loaded } };
}
