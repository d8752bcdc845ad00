/**
 * The reload phase: how long does a reload hold the management API, now that
 * it parses the catalogue on the API's own loop? One launcher with one
 * stand-in engine over the shipped catalogue (plus the stand-in's card) and
 * over 1,000 generated cards; `/health` is asked every 10 ms, one request at a
 * time, while the launcher takes `PLAN.reloadSighups` SIGHUPs one after the
 * other (each waits for its `reload:` line).
 *
 * @module
 */
import { freePorts } from "../../tests/support/helpers.ts";
import { type Bench, PLAN, progress, sleep, url } from "../plan.ts";
import { spawnLauncher, waitHealthy } from "../servers/spawn.ts";
import { catalogueText } from "./catalogue.ts";

/** Cards of the generated arm. */
export const RELOAD_CARDS = 1_000;
const SHIPPED = new URL("../../catalogue/optimizers.yaml", import.meta.url);

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

/** `/health` during reloads of the shipped catalogue and of 1,000 cards. */
export interface ReloadResults {
  shipped: ReloadArm;
  generated: ReloadArm;
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
 * Reloads a launcher over the shipped catalogue, then over 1,000 cards,
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
    `reload: ${PLAN.reloadSighups} SIGHUPs over the shipped catalogue and over ${RELOAD_CARDS} cards, /health every ${RELOAD_POLL_MS} ms`,
  );
  const shipped = `${bench.work}/reload_shipped.yaml`;
  // The shipped cards name engines the bench has not: the stand-in's card joins them.
  await Deno.writeTextFile(
    shipped,
    `${(await Deno.readTextFile(SHIPPED)).trimEnd()}\n${
      catalogueText(1, false).split("\n").slice(2).join("\n")
    }`,
  );
  const generated = `${bench.work}/reload_generated.yaml`;
  await Deno.writeTextFile(generated, catalogueText(RELOAD_CARDS, false));
  return {
    shipped: await measureArm(bench, shipped, mod),
    generated: await measureArm(bench, generated, mod),
  };
}
