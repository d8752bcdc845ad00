/**
 * Two `engine: vllm` cards with `sleep_after` whose awake footprints (0.6 of
 * the GPU each) do not fit on it together: the launcher starts the second by
 * putting the first to sleep, then wakes each one for the request that parks
 * in its `/load`, after putting the other to sleep (issue 54). Alternating
 * requests, streamed and not: every one is answered, no wake runs out of
 * memory, the device is never listed past its total, and the switch's
 * seconds (parked request seen to the wake's end) and the wake's own are
 * reported.
 *
 * On a real machine the engine is tools/gpu_engine.py (PyTorch: its sleep
 * frees its tensor and empties the cache, its wake allocates it again); with
 * `--stand-in`, the vLLM stand-in built from vLLM's source.
 *
 * @module
 */
import { sleep } from "../../src/common/sleep.ts";
import { freePorts } from "../../tests/support/helpers.ts";
import type { Scenario } from "./scenario.ts";
import { distribution, seconds } from "./scenario.ts";
import { type EngineSeen, expect, until } from "./scope.ts";

const NAMES = ["sleepa", "sleepb"] as const;
/** Each awake: 0.6 of the GPU, so two do not fit. */
const SHARE = 0.6;
/** Alternating requests: more on a GPU, where the figures are the point. */
const REQUESTS = { real: 10, "stand-in": 4 } as const;
const TOKENS = 4;
const TOKEN_MS = 20;

interface Journaled {
  at: string;
  model: string | null;
  reason?: string;
  detail?: string;
}

type Seen = Record<string, EngineSeen & { sleep?: SleepSeen | null }>;
interface SleepSeen {
  switches: number;
  wakes: number;
  made_room: number;
  launcher_sleep_off: string | null;
}

async function journal(root: string): Promise<Journaled[]> {
  const text = await Deno.readTextFile(`${root}/logs/events.jsonl`)
    .catch(() => "");
  return text.split("\n").filter(Boolean).flatMap((line) => {
    try {
      return [JSON.parse(line) as Journaled];
    } catch {
      return [];
    }
  });
}

/** `in 0.31 s` in a journal line's detail, in ms. */
function msIn(detail: string | undefined): number[] {
  const m = /\bin (\d+(?:\.\d+)?) s\b/.exec(detail ?? "");
  return m ? [Number(m[1]) * 1000] : [];
}

export const vllmSwitch: Scenario = {
  id: "vllm-switch",
  title:
    "two vLLM cards that do not fit together on one GPU: the launcher switches",
  async run({ world, scope }) {
    const real = world.mode === "real";
    const requests = REQUESTS[world.mode];
    const total = world.gpu.totalMiB;
    const need = Math.floor(SHARE * total);
    // The real engine's CUDA context comes on top of its tensor.
    const mib = real ? need - 1024 : need;
    const cards = Object.fromEntries(NAMES.map((name) => [name, {
      verb: "chat",
      hub: `org/${name}`,
      engine: "vllm",
      executable: world.sleeper,
      gpu_memory: `${need}MiB`,
      sleep_after: 600, // asleep only to make room
      args: world.sleeperArgs({ mib, tokens: TOKENS, tokenMs: TOKEN_MS }),
    }]));
    const port = freePorts(NAMES.length + 1);
    // No engine key: released vLLM builds answer their dev routes without it,
    // and the launcher then runs the card without its sleep.
    const launcher = await scope.launch(cards, [...NAMES], port, [], {
      LOCAL_ENGINE_API_KEY: "",
    });
    const loadBound = real ? 240_000 : 60_000;
    let seen: Seen | undefined;
    const loaded = await until(
      async () => {
        seen = await launcher.engines() as Seen | undefined;
        const states = NAMES.map((n) => seen?.[n]?.state);
        return states.every((s) => s === "ready" || s === "sleeping") &&
            states.includes("sleeping")
          ? seen
          : undefined;
      },
      loadBound,
      250,
    );
    expect(
      loaded !== undefined,
      `both loaded within ${seconds(loadBound)}, one asleep to make room`,
      NAMES.map((n) => `${n} ${seen?.[n]?.state ?? "unknown"}`).join(", ") +
        (launcher.status !== undefined ? " (the launcher exited)" : ""),
    );
    for (const n of NAMES) {
      const pid = loaded![n]!.pid;
      if (pid != null) scope.note(pid);
      const off = loaded![n]!.sleep?.launcher_sleep_off;
      expect(!off, `${n} slept and woken by the launcher`, `${off}`);
    }

    // The device's use, as nvidia-smi lists it, while requests alternate.
    let [peak, looks, stop] = [0, 0, false];
    const watch = (async () => {
      while (!stop) {
        const listed = await world.listed();
        if (listed) {
          looks++;
          peak = Math.max(
            peak,
            [...listed.values()].reduce((a, b) => a + b, 0),
          );
        }
        await sleep(200);
      }
    })();
    const first = NAMES.findIndex((n) => loaded![n]!.state === "sleeping");
    const from = Date.now(); // the probe's wake at the start is not one of these
    const answered: { name: string; stream: boolean; ms: number }[] = [];
    try {
      for (let i = 0; i < requests; i++) {
        const name = NAMES[(first + i) % NAMES.length]!;
        const stream = i % 2 === 1;
        const began = performance.now();
        const response = await fetch(
          `${loaded![name]!.url}/chat/completions`,
          {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({
              model: name,
              messages: [{ role: "user", content: "hi" }],
              max_tokens: TOKENS,
              stream,
            }),
            signal: AbortSignal.timeout(real ? 120_000 : 60_000),
          },
        ).catch((error) => error as Error);
        const text = response instanceof Response
          ? await response.text()
          : String(response);
        const ms = performance.now() - began;
        expect(
          response instanceof Response && response.status === 200 &&
            /t\d/.test(text),
          `request ${i + 1} (${name}, ${
            stream ? "streamed" : "plain"
          }) answered 200 with tokens`,
          `${
            response instanceof Response ? response.status : "no answer"
          } after ${seconds(ms)}: ${text.slice(0, 200)}`,
        );
        answered.push({ name, stream, ms });
      }
    } finally {
      stop = true;
      await watch;
    }

    const lines = (await journal(scope.root)).filter((e) =>
      (NAMES as readonly string[]).includes(e.model ?? "") &&
      Date.parse(e.at) >= from
    );
    const failed = lines.filter((e) => e.reason === "wake-failed");
    expect(
      failed.length === 0,
      "no wake out of memory (no wake-failed in the journal)",
      failed.map((e) => `${e.model}: ${e.detail}`).join("; "),
    );
    expect(
      peak <= total,
      `the GPU never listed past its ${total} MiB`,
      `${peak} MiB at its peak`,
    );
    const switches = lines.filter((e) => e.reason === "switch")
      .flatMap((e) => msIn(e.detail));
    const wakes = lines.filter((e) => e.reason === "woken")
      .flatMap((e) => msIn(e.detail));
    const room = lines.filter((e) => e.reason === "made-room").length;
    expect(
      switches.length >= requests - 1,
      `at least ${
        requests - 1
      } switches (each request found its engine asleep)`,
      `${switches.length}`,
    );
    return {
      summary:
        `${requests} alternating requests, all answered; ${switches.length} switches (parked request seen → wake's end) ${
          distribution(switches, [0.5, 1])
        } (p50 / max), the wake itself ${
          distribution(wakes, [0.5, 1])
        }; ${room} put to sleep to make room; peak ${peak} of ${total} MiB listed (${looks} looks); no wake out of memory`,
      details: answered.map((a, i) =>
        `- request ${i + 1}: ${a.name}, ${
          a.stream ? "streamed" : "plain"
        }, answered in ${seconds(a.ms)} (${TOKENS} tokens of ${TOKEN_MS} ms)`
      ),
    };
  },
};
