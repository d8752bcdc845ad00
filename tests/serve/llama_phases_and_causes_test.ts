/**
 * Load phases and exit causes with the real llama-server (`deno task engine:llama`) over the
 * tiny model: its own start-up lines give the load phases through to ready,
 * and a typo in a card's args ends in `failed`, cause `bad-arguments`, the
 * engine's line as the message, with no third start.
 */
import assert from "node:assert/strict";
import { writeTinyModel } from "../../tools/tiny_model.ts";
import { LLAMA_CPP } from "../../src/engines/kinds/llama_cpp.ts";
import { LoadWatch } from "../../src/engines/load_watch.ts";
import {
  freePorts,
  getJson,
  Launcher,
  makeRoot,
  readJournal,
  siteArgs,
  waitFor,
} from "../support/helpers.ts";
import { llamaRoot, llamaServer } from "../support/llama.ts";

const FIXTURE = new URL("../fixtures/llama.yaml", import.meta.url).pathname;

Deno.test("the real llama-server's own lines give its phases, loading then preparing, through to ready", async () => {
  const bin = llamaServer();
  const root = await makeRoot();
  try {
    const model = `${root}/models/tiny.gguf`;
    await writeTinyModel(model);
    const port = freePorts(1);
    const child = new Deno.Command(bin, {
      args: ["-m", model, "--host", "127.0.0.1", "--port", String(port)],
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const watch = new LoadWatch(LLAMA_CPP.output);
    const phases: string[] = [];
    let ready = false;
    const read = async (stream: ReadableStream<Uint8Array>) => {
      const feed = watch.feeder();
      for await (const chunk of stream) {
        feed(chunk);
        if (watch.phase !== null && watch.phase !== phases.at(-1)) {
          phases.push(watch.phase);
        }
        if (new TextDecoder().decode(chunk).includes("listening on")) {
          ready = true;
        }
      }
    };
    const reading = Promise.all([read(child.stdout), read(child.stderr)]);
    await waitFor(() => Promise.resolve(ready), "listening", 20_000);
    const health = await fetch(`http://127.0.0.1:${port}/health`);
    await health.body?.cancel();
    assert.equal(health.status, 200);
    assert.deepEqual(phases, ["loading", "preparing"]);
    assert.equal(watch.cause, undefined, "a clean start names no cause");
    child.kill("SIGTERM");
    await child.status;
    await reading;
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("a card with a typo in its args reaches failed after two starts: bad-arguments, the flag named", async () => {
  const { root, path } = await llamaRoot();
  const port = freePorts(1);
  await using launcher = new Launcher([
    "tiny-typo",
    ...siteArgs(port, root, FIXTURE),
    "--dev_mode",
    // Only a reload retries it (issue 35's --failed-retry would, later).
    "--failed-retry",
    "0",
  ], {
    PATH: path,
    MY_LOCAL: "",
    NUCLEUS_HOST: "",
    NUCLEUS_PORT: "",
    LOCAL_ENGINE_API_KEY: "",
  });
  try {
    await launcher.ready();
    type Entry = {
      state: string;
      pid: number | null;
      healthy: boolean;
      restarts: number;
      next_restart: string | null;
      last_exit: { cause: string; message: string | null; code: number };
    };
    let entry: Entry | undefined;
    await waitFor(
      async () => {
        const { body } = await getJson(
          `http://127.0.0.1:${port}/models?detail=1`,
        );
        entry = (body as { active: Record<string, Entry> }).active["tiny-typo"];
        return entry?.state === "failed";
      },
      "tiny-typo failed",
      20_000,
    );
    assert.equal(entry!.pid, null);
    assert.equal(entry!.healthy, false);
    assert.equal(entry!.next_restart, null);
    assert.equal(entry!.restarts, 1);
    assert.equal(entry!.last_exit.cause, "bad-arguments");
    assert.equal(entry!.last_exit.code, 1);
    assert.match(
      entry!.last_exit.message ?? "",
      /invalid argument: --bogus-flag/,
    );
    // No third start: failed, with no next_restart, is where it stays; the
    // journal (written in the background) says so once its line is there.
    let last: Record<string, unknown> | undefined;
    await waitFor(async () => {
      last = (await readJournal(root)).filter((e) => e.model === "tiny-typo")
        .at(-1);
      return last?.to === "failed";
    }, "failed in the journal");
    assert.equal(last!.reason, "bad-arguments");
    const log = await Deno.readTextFile(`${root}/logs/tiny-typo.log`);
    assert.equal(log.match(/ start: /g)?.length, 2);
    assert.match(log, /bad-arguments twice in a row/);
    // A reload retries it though its card did not change: two more starts.
    launcher.child.kill("SIGHUP");
    await launcher.waitForLine(/reload: .*tiny-typo/);
    await waitFor(
      async () => {
        const text = await Deno.readTextFile(`${root}/logs/tiny-typo.log`);
        return text.match(/ start: /g)?.length === 4 &&
          text.match(/twice in a row/g)?.length === 2;
      },
      "tiny-typo retried and failed again",
      20_000,
    );
  } finally {
    await launcher.stop();
    await Deno.remove(root, { recursive: true });
  }
});
