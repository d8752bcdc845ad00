/**
 * The drain phase (issue 37): streamed requests through a reload of their
 * engine's card and through a stop, with the drain (`--drain-timeout 30`) and
 * without (`--drain-timeout 0`). One launcher per arm with one stand-in engine
 * that serves vLLM's `/metrics` and streams `DRAIN_TOKENS` tokens, one every
 * `DRAIN_TOKEN_MS`; `DRAIN_STREAMS` streams run at once, each under way (2
 * tokens in) before the SIGHUP or SIGTERM. Counted: streams that ended whole
 * (every token and `[DONE]`) and cut, and the reload's (SIGHUP to its line) or
 * the stop's (SIGTERM to exit) time.
 *
 * @module
 */
import { freePorts } from "../../tests/support/helpers.ts";
import { chatStream, streamWhole } from "../../tests/support/streams.ts";
import { type Bench, progress, sleep } from "../plan.ts";
import { spawnLauncher, waitHealthy } from "../servers/spawn.ts";

/** Streams at once (the stand-in runs up to 8). */
export const DRAIN_STREAMS = 8;
export const DRAIN_TOKENS = 20;
export const DRAIN_TOKEN_MS = 100;

function cardText(maxLen: number): string {
  return `models:\n  streamer: { verb: chat, hub: org/streamer, args: { fake-metrics: vllm, fake-slots: ${DRAIN_STREAMS}, fake-tokens: ${DRAIN_TOKENS}, fake-token-ms: ${DRAIN_TOKEN_MS}, max-model-len: ${maxLen} } }\n`;
}

/** One arm: how many streams were cut, and how long the reload or stop took. */
export interface DrainArm {
  whole: number;
  cut: number;
  /** SIGHUP to the reload's line, or SIGTERM to the exit, in ms. */
  ms: number;
}

/** Reload and stop, each with the drain and with `--drain-timeout 0`. */
export interface DrainResults {
  reload: { drain: DrainArm; none: DrainArm };
  stop: { drain: DrainArm; none: DrainArm };
}

async function arm(
  bench: Bench,
  what: "reload" | "stop",
  drainSeconds: number,
): Promise<DrainArm> {
  await using stack = new AsyncDisposableStack();
  const port = freePorts(2);
  const catalogue = `${bench.work}/drain_${what}_${drainSeconds}.yaml`;
  await Deno.writeTextFile(catalogue, cardText(4096));
  const child = await spawnLauncher(bench, stack, ["streamer"], port, {
    catalogue,
    args: ["--drain-timeout", String(drainSeconds), "--grace", "5"],
    label: `${what}, --drain-timeout ${drainSeconds}`,
  });
  await waitHealthy(bench, child, port, ["streamer"]);
  const streams = Array.from(
    { length: DRAIN_STREAMS },
    () => chatStream(port + 1),
  );
  while (streams.some((s) => s.tokens < 2)) await sleep(10);
  let ms: number;
  if (what === "reload") {
    await Deno.writeTextFile(catalogue, cardText(8192));
    const sent = performance.now();
    Deno.kill(child.pid, "SIGHUP");
    const line = await child.waitForLine(/reload( refused)?: /, 60_000);
    if (/refused/.test(line.text)) throw new Error(line.text);
    ms = line.at - sent;
  } else {
    const stopped = await child.stop("SIGTERM", 60_000);
    ms = stopped.ms;
  }
  const ended = await Promise.all(
    streams.map(async (s) => streamWhole((await s.done).text, DRAIN_TOKENS)),
  );
  const whole = ended.filter(Boolean).length;
  return { whole, cut: ended.length - whole, ms };
}

/** Each arm once: reload and stop, with the drain and with `--drain-timeout 0`. */
export async function drainPhase(bench: Bench): Promise<DrainResults> {
  progress(
    `drain: ${DRAIN_STREAMS} streams of ${DRAIN_TOKENS} tokens every ${DRAIN_TOKEN_MS} ms through a reload and a stop, with the drain and with --drain-timeout 0`,
  );
  return {
    reload: {
      drain: await arm(bench, "reload", 30),
      none: await arm(bench, "reload", 0),
    },
    stop: {
      drain: await arm(bench, "stop", 30),
      none: await arm(bench, "stop", 0),
    },
  };
}
