/**
 * The footprint with the real llama-server (`deno task engine:llama`) over
 * the tiny model: the launcher's `-lv 4` makes it print its host buffers, and
 * `?detail=1` shows them as device `CPU`, each figure the one its own log
 * line printed; its start's steps and its recovery after a SIGKILL.
 */
import assert from "node:assert/strict";
import {
  freePorts,
  getJson,
  Launcher,
  siteArgs,
  waitFor,
} from "../support/helpers.ts";
import { llamaRoot } from "../support/llama.ts";
import type { Footprint } from "../../src/engines/footprint.ts";

const FIXTURE = new URL("../fixtures/llama.yaml", import.meta.url).pathname;

/** The sum of each matching line's MiB in the engine's own log. */
function printed(log: string, what: RegExp): number {
  const sizes = [...log.matchAll(what)].map((m) => Number(m[1]));
  assert.ok(sizes.length > 0, `${what} in the log`);
  return Math.round(sizes.reduce((a, b) => a + b) * 100) / 100;
}

Deno.test("the real llama-server's footprint: its model, KV and compute buffers on CPU, as its own lines print them; its start split by them, and its recovery after a kill", async () => {
  const { root, path } = await llamaRoot();
  const port = freePorts(1);
  await using launcher = new Launcher([
    "tiny-a",
    ...siteArgs(port, root, FIXTURE),
    "--dev_mode",
  ], {
    PATH: path,
    MY_LOCAL: "",
    NUCLEUS_HOST: "",
    NUCLEUS_PORT: "",
    LOCAL_ENGINE_API_KEY: "",
  });
  try {
    await launcher.ready();
    let footprint: Footprint | null = null;
    await waitFor(
      async () => {
        const { body } = await getJson(
          `http://127.0.0.1:${port}/models?detail=1`,
        );
        const entry = (body as {
          active: Record<
            string,
            { state: string; footprint: Footprint | null }
          >;
        })
          .active["tiny-a"]!;
        footprint = entry.footprint;
        return entry.state === "ready" && footprint?.compute_mib != null;
      },
      "tiny-a ready with its footprint",
      20_000,
    );
    const f = footprint! as Footprint;
    const log = await Deno.readTextFile(`${root}/logs/tiny-a.log`);
    assert.equal(f.device, "CPU");
    assert.equal(
      f.weights_mib,
      printed(log, /model buffer size = +([\d.]+) MiB/g),
    );
    assert.equal(
      f.kv_cache_mib,
      printed(log, /KV buffer size = +([\d.]+) MiB/g),
    );
    assert.equal(
      f.compute_mib,
      printed(log, /compute buffer size = +([\d.]+) MiB/g),
    );
    // ctx-size 256 in the card: its KV cache holds 256 cells.
    assert.equal(f.kv_tokens, 256);
    assert.equal(
      f.total_mib,
      Math.round((f.weights_mib! + f.kv_cache_mib! + f.compute_mib!) * 100) /
        100,
    );
    assert.equal(f.from, "load lines", "no nvidia-smi figure for a CPU run");
    assert.match(log, /CPU_Mapped model buffer size/);

    // Its start, split by its own lines: llama-server listens (503) before
    // `load_model: loading model`, so the load's line, not the first answer,
    // begins the step after the spawn; the steps add up to the start.
    type Start = { seconds: number; phases: Record<string, number> };
    type Entry = {
      state: string;
      pid: number | null;
      last_start: Start | null;
      last_recovery: { seconds: number; cause: string } | null;
    };
    const entry = async () =>
      ((await getJson(`http://127.0.0.1:${port}/models?detail=1`)).body as {
        active: Record<string, Entry>;
      }).active["tiny-a"]!;
    const first = await entry();
    const start = first.last_start!;
    assert.ok("loading" in start.phases, JSON.stringify(start));
    assert.ok(!("listening" in start.phases), JSON.stringify(start));
    const sum = Object.values(start.phases).reduce((a, b) => a + b, 0);
    assert.ok(Math.abs(sum - start.seconds) < 0.01, JSON.stringify(start));
    assert.equal(first.last_recovery, null);
    // Killed: the recovery runs from its exit, through the 1 s backoff, to ready.
    Deno.kill(first.pid!, "SIGKILL");
    let again: Entry | undefined;
    await waitFor(
      async () => (again = await entry()).last_recovery !== null,
      "tiny-a recovered",
      20_000,
    );
    assert.equal(again!.last_recovery!.cause, "signal");
    assert.ok(again!.last_recovery!.seconds >= 1, "the backoff is in it");
  } finally {
    await launcher.stop();
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("a request whose text holds llama.cpp's own load lines (CUDA0 and CPU) changes neither the footprint nor the book of the real llama-server", async () => {
  const { root, path } = await llamaRoot();
  const port = freePorts(1);
  // At -lv 5 (debug, common/log.h) it logs each request's body
  // (tools/server/server-http.cpp `log_server_request`); -lv 4 does not.
  const catalogue = `${root}/verbose.yaml`;
  await Deno.writeTextFile(
    catalogue,
    "models:\n  tiny-a: { verb: chat, local: tiny-llama, engine: llama.cpp, args: { ctx-size: 256, parallel: 1, threads: 1, no-warmup: true, log-verbosity: 5 } }\n",
  );
  await using launcher = new Launcher([
    "tiny-a",
    ...siteArgs(port, root, catalogue),
    "--dev_mode",
  ], {
    PATH: path,
    MY_LOCAL: "",
    NUCLEUS_HOST: "",
    NUCLEUS_PORT: "",
    LOCAL_ENGINE_API_KEY: "",
  });
  try {
    await launcher.ready();
    type Entry = { state: string; url: string; footprint: Footprint | null };
    const entry = async () =>
      ((await getJson(`http://127.0.0.1:${port}/models?detail=1`)).body as {
        active: Record<string, Entry>;
      }).active["tiny-a"]!;
    // The book is written at the first 200, which these polls are the first
    // to see (no load poll for a local CPU card; the health round is 10 s).
    await waitFor(
      async () => {
        const { state, footprint } = await entry();
        return state === "ready" && footprint?.compute_mib != null;
      },
      "tiny-a ready and measured",
      20_000,
    );
    const book = `${root}/data/footprints.json`;
    await waitFor(
      async () => (await Deno.readTextFile(book).catch(() => "")) !== "",
      "the book written",
      5_000,
    );
    const before = {
      footprint: (await entry()).footprint,
      book: await Deno.readTextFile(book),
    };
    const { url } = await entry();
    // At -lv 5 it logs a Responses request, converted, on one line
    // (tools/server/server-context.cpp `converted request: %s`), and each
    // chat message it parses (common/chat.cpp `Parsed message: %s`).
    const forged = [
      "load_tensors:        CUDA0 model buffer size = 9999999.00 MiB",
      "0.00.018.223 I load_tensors:          CPU model buffer size = 9999999.00 MiB",
    ].join("\n");
    for (
      const [path, body] of [
        ["responses", { input: forged, max_output_tokens: 2 }],
        ["chat/completions", {
          max_tokens: 2,
          messages: [{ role: "user", content: forged }],
        }],
      ] as const
    ) {
      const response = await fetch(`${url}/${path}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "tiny-a", ...body }),
      });
      await response.body?.cancel();
    }
    // Written to the log after the launcher read it (server_process.ts `pump`).
    await waitFor(
      async () =>
        (await Deno.readTextFile(`${root}/logs/tiny-a.log`)).includes(
          "converted request:",
        ),
      "the request in the engine's log",
      5_000,
    );
    assert.deepEqual((await entry()).footprint, before.footprint);
    assert.equal(await Deno.readTextFile(book), before.book);
  } finally {
    await launcher.stop();
    await Deno.remove(root, { recursive: true });
  }
});
