/**
 * The demo (`deno task demo`), run as its task runs it, over the cached
 * llama-server: its launcher runs with crash safety on (the watchdog, `/proc`,
 * the open-files limit) and says no warning.
 */
import assert from "node:assert/strict";
import { isLlamaServerBuilt } from "../../tools/llama_server.ts";
import {
  childrenNamed,
  freePorts,
  pidAlive,
  waitFor,
} from "../support/helpers.ts";

const DENO_JSON = new URL("../../deno.json", import.meta.url);

/** The `demo` task's `deno run` flags and script, as deno.json has them. */
async function demoTask(): Promise<string[]> {
  const config = JSON.parse(await Deno.readTextFile(DENO_JSON));
  const words = (config.tasks.demo as string).split(/\s+/);
  assert.deepEqual(words.slice(0, 2), ["deno", "run"]);
  assert.equal(words.at(-1), "tools/demo.ts");
  return words.slice(1);
}

/** Collects a stream's text as it comes. */
function collect(stream: ReadableStream<Uint8Array>): {
  text(): string;
  done: Promise<void>;
} {
  let text = "";
  const done = (async () => {
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      text += chunk;
    }
  })();
  return { text: () => text, done };
}

/** The command line of a process, its arguments joined by spaces. */
function cmdline(pid: number): string {
  return Deno.readTextFileSync(`/proc/${pid}/cmdline`).split("\0").join(" ");
}

Deno.test("the demo's launcher starts its watchdog, reads /proc and the open-files limit, and warns of nothing", async () => {
  assert.ok(isLlamaServerBuilt(), "run deno task engine:llama first");
  const root = await Deno.makeTempDir({ prefix: "serve-demo-" });
  const port = freePorts(1);
  const demo = new Deno.Command(Deno.execPath(), {
    args: [
      ...await demoTask(),
      "--port",
      String(port),
      "--directory",
      root,
    ],
    cwd: new URL("../../", import.meta.url).pathname,
    env: { NO_COLOR: "1", LOCAL_ENGINE_API_KEY: "" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    // Its own group: a failed test stops the demo and its launcher together.
    detached: true,
  }).spawn();
  let exited = false;
  const status = demo.status.then((s) => {
    exited = true;
    return s;
  });
  const stdout = collect(demo.stdout);
  const stderr = collect(demo.stderr);
  try {
    await waitFor(
      () => stdout.text().includes("tiny-llama is ready"),
      "the demo to say tiny-llama is ready",
      60_000,
    );
    const [launcher] = childrenNamed(demo.pid, "deno");
    assert.ok(launcher, "the demo runs its launcher as a child");
    const watchdogs = childrenNamed(launcher, "sh").filter((pid) =>
      /\bwatchdog\b/.test(cmdline(pid))
    );
    assert.equal(watchdogs.length, 1, "the launcher has one watchdog");
    const record = JSON.parse(
      await Deno.readTextFile(`${root}/data/tiny-llama.engine.json`),
    );
    assert.notEqual(record.startTime, "", "start times read from /proc");
    assert.notEqual(record.launcherStartTime, "");

    demo.kill("SIGTERM"); // the demo alone: it passes the signal on
    assert.equal((await status).code, 0);
    await Promise.all([stdout.done, stderr.done]);
    await waitFor(
      () => !pidAlive(watchdogs[0]!),
      "the watchdog to exit",
      5_000,
    );
    const log = stderr.text();
    assert.match(log, /\[serve\] open files: limit \d+/);
    assert.deepEqual(
      log.split("\n").filter((line) => /^\[serve\] (warn|error):/.test(line)),
      [],
      log,
    );
    assert.doesNotMatch(log, /Requires .* access|NotCapable/);
  } finally {
    // SIGTERM, not SIGKILL: the launcher must stop llama-server on its way out.
    if (!exited) Deno.kill(-demo.pid, "SIGTERM");
    await status;
    await Promise.all([stdout.done, stderr.done]);
    await Deno.remove(root, { recursive: true });
  }
});
