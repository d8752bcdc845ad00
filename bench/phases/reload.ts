/**
 * The reload phase (issue 31): does a reload of a large catalogue hold the
 * management API? One launcher with one stand-in engine over a generated
 * catalogue of 5,000 cards (written out in full, or sharing one `args`
 * mapping through an alias each: `phases/catalogue.ts`'s); `/health` is asked
 * every 10 ms, one request at a time, while the launcher takes
 * `PLAN.reloadSighups` SIGHUPs one after the other (each waits for its
 * `reload:` line). Every answer's wait is kept, and each reload's time.
 *
 * @module
 */
import { freePorts } from "../../tests/support/helpers.ts";
import { type Bench, PLAN, progress, sleep, url } from "../plan.ts";
import { spawnLauncher, waitHealthy } from "../servers/spawn.ts";
import { CATALOGUE_CARDS, catalogueText } from "./catalogue.ts";

/** How often `/health` is asked during a reload, in ms. */
export const RELOAD_POLL_MS = 10;
const RELOAD_LINE = /reload( refused)?: /;

/** One arm's measurements. */
export interface ReloadArm {
  /** Every `/health` wait while a reload ran, in ms. */
  waits: number[];
  /** SIGHUP to its `reload:` line, each reload, in ms. */
  reloads: number[];
}

/** `/health` during reloads of 5,000 cards, plain and with an alias each. */
export interface ReloadResults {
  plain: ReloadArm;
  aliases: ReloadArm;
}

/**
 * Asks `/health` every `RELOAD_POLL_MS` until `done` resolves; the waits.
 * One request at a time: a stalled loop shows as one long wait.
 */
async function pollHealth(
  bench: Bench,
  port: number,
  done: Promise<unknown>,
): Promise<number[]> {
  let over = false;
  done.finally(() => over = true);
  const waits: number[] = [];
  while (!over) {
    const began = performance.now();
    const response = await fetch(url(port, "/health"), {
      client: bench.client,
      signal: bench.signal,
    });
    await response.body?.cancel();
    if (!response.ok) throw new Error(`/health answered ${response.status}`);
    waits.push(performance.now() - began);
    await sleep(Math.max(0, RELOAD_POLL_MS - (performance.now() - began)));
  }
  return waits;
}

/** One launcher over `file`: SIGHUPs one after the other, `/health` polled throughout each. */
async function measureArm(
  bench: Bench,
  file: string,
  mod: string | undefined,
): Promise<ReloadArm> {
  await using stack = new AsyncDisposableStack();
  const port = freePorts(2);
  const child = await spawnLauncher(bench, stack, ["c0"], port, {
    catalogue: file,
    ...(mod ? { mod, label: mod } : {}),
  });
  await waitHealthy(bench, child, port, ["c0"]);
  const arm: ReloadArm = { waits: [], reloads: [] };
  for (let i = 0; i < PLAN.reloadSighups; i++) {
    const before = child.lines.filter((l) => RELOAD_LINE.test(l.text)).length;
    const sent = performance.now();
    const reloaded = (async () => {
      Deno.kill(child.pid, "SIGHUP");
      while (
        child.lines.filter((l) => RELOAD_LINE.test(l.text)).length <= before
      ) {
        if (child.status) throw new Error(`launcher exited:\n${child.tail()}`);
        if (performance.now() - sent > 60_000) {
          throw new Error(`no reload line within 60 s:\n${child.tail()}`);
        }
        await sleep(5);
      }
      const line = child.lines.filter((l) => RELOAD_LINE.test(l.text))[before]!;
      if (/refused/.test(line.text)) throw new Error(line.text);
      return line.at - sent;
    })();
    const [waits, ms] = await Promise.all([
      pollHealth(bench, port, reloaded),
      reloaded,
    ]);
    arm.waits.push(...waits);
    arm.reloads.push(ms);
  }
  return arm;
}

/**
 * Reloads a launcher over 5,000 cards, plain then with an alias each,
 * `/health` polled throughout.
 *
 * @param bench The bench context.
 * @param mod The launcher's entry point: this tree's by default (another
 *   tree's, to compare by hand).
 */
export async function reloadPhase(
  bench: Bench,
  mod?: string,
): Promise<ReloadResults> {
  progress(
    `reload: ${PLAN.reloadSighups} SIGHUPs over ${CATALOGUE_CARDS} cards, plain and with aliases, /health every ${RELOAD_POLL_MS} ms`,
  );
  const files = { plain: "", aliases: "" };
  for (const key of ["plain", "aliases"] as const) {
    files[key] = `${bench.work}/reload_${key}.yaml`;
    await Deno.writeTextFile(
      files[key],
      catalogueText(CATALOGUE_CARDS, key === "aliases"),
    );
  }
  return {
    plain: await measureArm(bench, files.plain, mod),
    aliases: await measureArm(bench, files.aliases, mod),
  };
}
