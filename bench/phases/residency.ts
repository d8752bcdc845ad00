/**
 * The residency phase, self-waking half (issue 54 item 6,
 * `deno task bench --only=residency`): the launcher CLI over the real
 * llama-server on CPU (`deno task engine:llama`), serving a GGUF this phase
 * writes with `tools/gguf.ts`, card `sleep_after: 1`. Each round: wait until
 * `?detail=1` says `sleeping` (a fresh sleep), one streamed chat (the first
 * token asleep: llama-server reloads its model), then `AWAKE_PER_ROUND` more
 * at once (awake), then a cold start: a fresh launcher over a fresh root,
 * timed from its spawn to the first token of a request sent again while the
 * port refuses or answers 503. The launcher's own figures (the residue asleep
 * and awake, each wake's seconds) come from `GET /models?detail=1`.
 *
 * @module
 */
import { dirname } from "node:path";
import { tinyLlama, type TinyLlamaOptions } from "../../tools/gguf.ts";
import { writeFileAtomic } from "../../tools/tiny_model.ts";
import {
  isLlamaServerBuilt,
  llamaServerPath,
} from "../../tools/llama_server.ts";
import { freePorts, pathWith } from "../../tests/support/helpers.ts";
import {
  type ChatOptions,
  type FirstToken,
  firstToken,
  type FirstTokenFromStart,
  firstTokenFromStart,
} from "../load/first_token.ts";
import {
  engineDetail,
  type EngineDetailView,
  makeRootIn,
  spawnLauncher,
  stopCleanly,
  waitHealthy,
} from "../servers/spawn.ts";
import { type Bench, progress, removeDir, sleep } from "../plan.ts";

export const RESIDENCY_CARD = "resident";
export const SLEEP_AFTER_S = 1;
export const RESIDENCY_ROUNDS = 10;
export const AWAKE_PER_ROUND = 2;
export const MAX_TOKENS = 4;
/** `--health-interval`: a round must see the engine awake (for its awake bytes) within its 1 s awake. */
export const HEALTH_INTERVAL_S = 0.5;
/** After `sleeping` shows: llama-server prints its line before it frees the model. */
const SETTLE_MS = 250;
/** Six blocks of width 1024, feed-forward 2816: 296 MiB of f32, generated and written in 6–9 s on two cores. */
export const RESIDENCY_MODEL: TinyLlamaOptions = {
  embeddingLength: 1024,
  headCount: 16,
  headCountKv: 16,
  feedForwardLength: 2816,
  blockCount: 6,
  contextLength: 256,
};
const KEY = "bench-residency-key";

/** One round: a first token asleep, then awake, then from a cold start. */
export interface ResidencyRound {
  asleep: FirstToken;
  /** The launcher's `last_wake_seconds` for that wake; null when it did not count one. */
  wakeSeconds: number | null;
  awake: FirstToken[];
  /** False when the engine slept or woke between the awake requests (they are then left out). */
  awakeHeld: boolean;
  cold: FirstTokenFromStart & {
    /** The cold engine's start as its launcher measured it (`last_start.seconds`). */
    engineSeconds: number | null;
  };
}

export interface ResidencyResults {
  modelBytes: number;
  /** Generating and writing the GGUF, ms. */
  writeMs: number;
  rounds: ResidencyRound[];
  /** The launcher's sleep view after the last sleep. */
  sleep: NonNullable<EngineDetailView["sleep"]>;
  /** The whole phase, s. */
  seconds: number;
  /** One-minute load average before and after. */
  load: [number, number];
}

/**
 * The client's options for request `n`: a prompt whose first character
 * differs from the last one's, so llama-server's prompt cache keeps only the
 * template's `user: ` prefix awake, as a wake keeps none.
 */
function chat(bench: Bench, n: number): ChatOptions {
  const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  return {
    client: bench.client,
    key: KEY,
    prompt: `${letters[n % letters.length]} tells a short story`,
    maxTokens: MAX_TOKENS,
    // The model's vocabulary is bytes: without EOS (2), the control tokens
    // and the bytes 0x80 and up, each token is one ASCII character, so the
    // first token is the first chunk (llama-server holds back an incomplete
    // UTF-8 character, server-context.cpp `validate_utf8`).
    extra: {
      logit_bias: Object.fromEntries(
        [0, 1, 2, 3, ...Array.from({ length: 128 }, (_, i) => 132 + i)]
          .map((id) => [String(id), -100]),
      ),
    },
  };
}

// One thread: on two cores shared with other work, llama.cpp's two threads
// wait on each other whenever one loses its core (a token's eval went from
// 20 to 220 ms here under a load average of 3), which swamps the wake.
function catalogueText(): string {
  return `models:\n  ${RESIDENCY_CARD}:\n    verb: chat\n    local: ${RESIDENCY_CARD}.gguf\n    engine: llama.cpp\n    sleep_after: ${SLEEP_AFTER_S}\n    args: { ctx-size: 256, parallel: 1, threads: 1 }\n`;
}

/** Polls the engine's detail every 50 ms until `test` holds. */
async function until(
  bench: Bench,
  port: number,
  test: (view: EngineDetailView) => boolean,
  what: string,
  ms = 30_000,
): Promise<EngineDetailView> {
  const deadline = performance.now() + ms;
  let last: EngineDetailView | undefined;
  while (performance.now() < deadline && !bench.signal.aborted) {
    // A launcher answers its own port after its engines' first spawn.
    last = await engineDetail(bench, port, RESIDENCY_CARD).catch(() => last);
    if (last && test(last)) return last;
    await sleep(50);
  }
  throw new Error(
    `Cannot measure residency: ${what} not seen within ${ms} ms (state ${last?.state}, sleep ${
      JSON.stringify(last?.sleep)
    })`,
  );
}

/** A fresh launcher over a fresh root holding the same GGUF (a hard link): spawn to first token. */
async function coldStart(
  bench: Bench,
  model: string,
  catalogue: string,
  path: string,
  n: number,
): Promise<ResidencyRound["cold"]> {
  const root = await makeRootIn(bench.work);
  try {
    await Deno.link(model, `${root}/models/${RESIDENCY_CARD}.gguf`);
    await using stack = new AsyncDisposableStack();
    const port = freePorts(2);
    const child = await spawnLauncher(bench, stack, [RESIDENCY_CARD], port, {
      root,
      catalogue,
      path,
      env: { LOCAL_ENGINE_API_KEY: KEY },
      args: ["--health-interval", String(HEALTH_INTERVAL_S)],
      label: "llama-server, cold",
    });
    const got = await firstTokenFromStart(
      port + 1,
      child.spawnedAt,
      chat(bench, n),
    );
    const view = await until(
      bench,
      port,
      (v) => typeof v.last_start?.seconds === "number",
      "the cold engine's start",
      10_000,
    ).catch(() => undefined);
    await stopCleanly([child]);
    return { ...got, engineSeconds: view?.last_start?.seconds ?? null };
  } finally {
    await removeDir(root);
  }
}

/** Every round, then the launcher's sleep view. */
export async function residencyPhase(
  bench: Bench,
): Promise<ResidencyResults> {
  if (!isLlamaServerBuilt()) {
    throw new Error(
      `Cannot run the residency row: no llama-server build at ${llamaServerPath()} (run deno task engine:llama first)`,
    );
  }
  const began = performance.now();
  const loadBefore = Deno.loadavg()[0] ?? Number.NaN;
  const root = await makeRootIn(bench.work);
  const model = `${root}/models/${RESIDENCY_CARD}.gguf`;
  await writeFileAtomic(model, tinyLlama(RESIDENCY_MODEL));
  const writeMs = performance.now() - began;
  const modelBytes = (await Deno.stat(model)).size;
  progress(
    `residency: ${(modelBytes / 2 ** 20).toFixed(0)} MiB GGUF written in ${
      (writeMs / 1000).toFixed(1)
    } s; ${RESIDENCY_ROUNDS} rounds of asleep, ${AWAKE_PER_ROUND} awake and one cold first token (sleep_after: ${SLEEP_AFTER_S})`,
  );
  const catalogue = `${bench.work}/residency.yaml`;
  await Deno.writeTextFile(catalogue, catalogueText());
  const path = pathWith(dirname(llamaServerPath()));
  await using stack = new AsyncDisposableStack();
  const port = freePorts(2);
  const launcher = await spawnLauncher(bench, stack, [RESIDENCY_CARD], port, {
    root,
    catalogue,
    path,
    env: { LOCAL_ENGINE_API_KEY: KEY },
    args: ["--health-interval", String(HEALTH_INTERVAL_S)],
    label: `llama-server, sleep_after ${SLEEP_AFTER_S}`,
  });
  await waitHealthy(bench, launcher, port, [RESIDENCY_CARD]);
  const asleep = async (residue: boolean) => {
    const view = await until(
      bench,
      port,
      (v) =>
        v.state === "sleeping" &&
        (!residue || typeof v.sleep?.residue_bytes === "number"),
      residue ? "a sleep with its residue measured" : "a sleep",
    );
    await sleep(SETTLE_MS);
    return view;
  };
  const rounds: ResidencyRound[] = [];
  let n = 0;
  for (let round = 0; round < RESIDENCY_ROUNDS; round++) {
    const wakes = (await asleep(round === 0)).sleep?.wakes ?? 0;
    const sleeper = await firstToken(port + 1, chat(bench, n++));
    const woken = await until(
      bench,
      port,
      (v) => (v.sleep?.wakes ?? 0) > wakes,
      "the wake counted",
      5_000,
    ).catch(() => undefined);
    const awake: FirstToken[] = [];
    for (let i = 0; i < AWAKE_PER_ROUND; i++) {
      awake.push(await firstToken(port + 1, chat(bench, n++)));
    }
    const after = await engineDetail(bench, port, RESIDENCY_CARD);
    const awakeHeld = after?.state === "ready" &&
      after.sleep?.wakes === wakes + 1;
    const cold = await coldStart(bench, model, catalogue, path, n++);
    rounds.push({
      asleep: sleeper,
      wakeSeconds: woken?.sleep?.last_wake_seconds ?? null,
      awake,
      awakeHeld,
      cold,
    });
    progress(
      `residency round ${round + 1}: asleep ${sleeper.ms.toFixed(0)} ms (wake ${
        woken?.sleep?.last_wake_seconds?.toFixed(3) ?? "not counted"
      } s), awake ${awake.map((a) => a.ms.toFixed(0)).join(" ")} ms${
        awakeHeld ? "" : " (slept between: left out)"
      }, cold ${cold.ms.toFixed(0)} ms`,
    );
  }
  const last = await asleep(true);
  await stopCleanly([launcher]);
  if (!last.sleep) throw new Error("Cannot measure residency: no sleep view");
  return {
    modelBytes,
    writeMs,
    rounds,
    sleep: last.sleep,
    seconds: (performance.now() - began) / 1000,
    load: [loadBefore, Deno.loadavg()[0] ?? Number.NaN],
  };
}
