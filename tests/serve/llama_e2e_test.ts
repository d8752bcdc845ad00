/**
 * End to end with the real llama.cpp `llama-server`: the launcher CLI in a
 * subprocess starts the cached build (`deno task engine:llama`) over the
 * project's tiny random-weight model, and clients talk to the engine URL that
 * `GET /models` reports, through the official `openai` client and raw `fetch`.
 *
 * Without the build every test fails with "run deno task engine:llama first":
 * they never pass silently.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import {
  freePorts,
  getJson,
  Launcher,
  listening,
  pidAlive,
  siteArgs,
  waitFor,
} from "../support/helpers.ts";
import { llamaRoot } from "../support/llama.ts";

/** tiny-a, tiny-b (same model twice) and tiny-slow (a slow, honest start). */
const FIXTURE = new URL("../fixtures/llama.yaml", import.meta.url).pathname;
const HOST = "127.0.0.1";

interface ModelsBody {
  active: Record<string, { verb: string; url: string; healthy: boolean }>;
  catalogue: string[];
}

interface Run extends AsyncDisposable {
  root: string;
  /** The management port; engine n listens on port + n. */
  port: number;
  launcher: Launcher;
  /** Every `healthy` value each engine showed, from the first answer of /models on. */
  seen: Record<string, boolean[]>;
  /** The engines' pids, from the launcher's `engine NAME (llama.cpp) started, pid N` lines. */
  pids(): Promise<Record<string, number>>;
}

/**
 * Starts the CLI for `models` with the real llama-server first on PATH and the
 * tiny model at `<root>/models/tiny-llama/tiny-llama.gguf`, then polls
 * `GET /models` from the moment the process is spawned (refusals included, so
 * the very first answer is seen) until every engine is healthy.
 */
async function launch(
  models: string[],
  options: { catalogue?: string; env?: Record<string, string> } = {},
): Promise<Run> {
  const { root, path } = await llamaRoot();
  const port = freePorts(models.length);
  const launcher = new Launcher([
    ...models,
    ...siteArgs(port, root, options.catalogue ?? null),
    "--dev_mode",
    "--grace",
    "5",
  ], {
    PATH: path,
    // Keep the runner's own settings out: only the flags above count.
    MY_LOCAL: "",
    NUCLEUS_HOST: "",
    NUCLEUS_PORT: "",
    LOCAL_ENGINE_API_KEY: "",
    ...options.env,
  });
  const run: Run = {
    root,
    port,
    launcher,
    seen: {},
    async pids() {
      const pids: Record<string, number> = {};
      for (const name of models) {
        const line = await launcher.waitForLine(
          new RegExp(`engine ${name} \\(llama\\.cpp\\) started, pid \\d+`),
        );
        pids[name] = Number(/pid (\d+)/.exec(line)?.[1]);
      }
      return pids;
    },
    async [Symbol.asyncDispose]() {
      // Safety net for a failed test: normally shutdown() has done all this.
      const pids = launcher.lines.flatMap((l) => {
        const match = /\(llama\.cpp\) started, pid (\d+)/.exec(l);
        return match ? [Number(match[1])] : [];
      });
      await launcher.stop();
      for (const pid of pids) {
        if (pidAlive(pid)) {
          try {
            Deno.kill(-pid, "SIGKILL");
          } catch {
            // Gone in between.
          }
        }
      }
      await Deno.remove(root, { recursive: true }).catch(() => {});
    },
  };
  try {
    await untilHealthy(run, models);
  } catch (error) {
    await run[Symbol.asyncDispose]();
    throw error;
  }
  return run;
}

async function getModels(port: number): Promise<ModelsBody> {
  const { status, body } = await getJson(`http://${HOST}:${port}/models`);
  assert.equal(status, 200);
  return body as ModelsBody;
}

/** Polls /models every few ms, recording each engine's `healthy`, until all are true. */
async function untilHealthy(run: Run, names: string[]): Promise<void> {
  for (const name of names) run.seen[name] = [];
  await waitFor(
    async () => {
      if (run.launcher.status) {
        throw new Error(
          `launcher exited (${run.launcher.status.code}):\n${run.launcher.stderr}`,
        );
      }
      let body: ModelsBody;
      try {
        body = await getModels(run.port);
      } catch (error) {
        if (error instanceof TypeError) return false; // not listening yet
        throw error;
      }
      for (const name of names) {
        const entry = body.active[name];
        assert.ok(entry, `/models lists ${name}`);
        run.seen[name]?.push(entry.healthy);
      }
      return names.every((name) => body.active[name]?.healthy);
    },
    `every engine healthy in /models (${names.join(", ")})`,
    30_000,
  );
}

/** Asserts the values run false* then true+: once healthy, never unhealthy again. */
function assertFalseThenTrue(seen: boolean[] | undefined, name: string): void {
  assert.ok(seen && seen.length > 0, `/models answered for ${name}`);
  const firstTrue = seen.indexOf(true);
  assert.ok(firstTrue >= 0, `${name} became healthy`);
  assert.ok(
    seen.slice(firstTrue).every(Boolean) &&
      seen.slice(0, firstTrue).every((h) => !h),
    `${name}: healthy went false* then true, saw ${JSON.stringify(seen)}`,
  );
}

/** SIGTERM to the launcher; asserts exit 0, no engine process left, no port listening. */
async function shutdown(run: Run): Promise<void> {
  const pids = await run.pids();
  const names = Object.keys(pids);
  const status = await run.launcher.stop("SIGTERM");
  assert.equal(
    status.code,
    0,
    `launcher exit code after SIGTERM:\n${run.launcher.stderr}`,
  );
  assert.equal(status.signal, null);
  for (const [name, pid] of Object.entries(pids)) {
    assert.ok(!pidAlive(pid), `llama-server for ${name} (pid ${pid}) is gone`);
  }
  for (let n = 0; n <= names.length; n++) {
    assert.ok(
      !(await listening(run.port + n)),
      `nothing listens on ${run.port + n}`,
    );
  }
}

function client(baseURL: string, apiKey = "no-key"): OpenAI {
  return new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 20_000 });
}

const HELLO = [{ role: "user" as const, content: "Hello" }];

Deno.test("GET /models reports llama-server not healthy while it loads, then healthy", async () => {
  // The shipped tiny-llama card loads in ~20 ms, too fast to catch reliably, so
  // this card makes llama-server allocate a 1M-token KV cache first (see
  // tests/fixtures/llama.yaml): a real load of a few hundred ms during which the
  // engine answers 503. /models is polled from the moment the launcher starts.
  await using run = await launch(["tiny-slow"], { catalogue: FIXTURE });
  const seen = run.seen["tiny-slow"];
  assert.equal(
    seen?.[0],
    false,
    `first /models answer shows tiny-slow loading: ${JSON.stringify(seen)}`,
  );
  assertFalseThenTrue(seen, "tiny-slow");
  // Stays healthy, and the engine itself agrees.
  for (let i = 0; i < 3; i++) {
    assert.equal(
      (await getModels(run.port)).active["tiny-slow"]?.healthy,
      true,
    );
  }
  const health = await getJson(`http://${HOST}:${run.port + 1}/health`);
  assert.equal(health.status, 200);
  assert.deepEqual(health.body, { status: "ok" });
  await shutdown(run);
});

Deno.test("the engine URL from GET /models serves /v1/models and a streamed chat completion", async () => {
  // The catalogue shipped with the package, card tiny-llama.
  await using run = await launch(["tiny-llama"]);
  // Too fast to insist on a false first answer; the order must still hold.
  assertFalseThenTrue(run.seen["tiny-llama"], "tiny-llama");
  const entry = (await getModels(run.port)).active["tiny-llama"];
  assert.deepEqual(entry, {
    verb: "chat",
    url: `http://${HOST}:${run.port + 1}/v1`,
    healthy: true,
  });
  const url = entry.url;

  const openai = client(url);
  const ids: string[] = [];
  for await (const model of openai.models.list()) ids.push(model.id);
  assert.deepEqual(ids, ["tiny-llama"]);

  const stream = await openai.chat.completions.create({
    model: "tiny-llama",
    messages: HELLO,
    max_tokens: 8,
    stream: true,
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.ok(chunks.length >= 1, "at least one chunk");
  for (const chunk of chunks) {
    assert.equal(chunk.object, "chat.completion.chunk");
    assert.equal(chunk.model, "tiny-llama");
  }
  assert.ok(
    chunks.some((c) => c.choices[0]?.finish_reason),
    "a chunk carries the finish reason",
  );

  // The same request raw: SSE framing and the literal terminator.
  const response = await fetch(`${url}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: "tiny-llama",
      messages: HELLO,
      max_tokens: 8,
      stream: true,
    }),
  });
  assert.equal(response.status, 200);
  assert.match(
    response.headers.get("content-type") ?? "",
    /text\/event-stream/,
  );
  const lines = (await response.text()).split("\n").filter((l) => l.trim());
  assert.ok(lines.length >= 2, `SSE lines: ${JSON.stringify(lines)}`);
  assert.ok(lines.slice(0, -1).every((l) => l.startsWith("data: {")));
  assert.equal(lines.at(-1), "data: [DONE]");
  await shutdown(run);
});

Deno.test("with LOCAL_ENGINE_API_KEY set, llama-server demands the key on /v1 but not on /health", async () => {
  const key = `e2e-${crypto.randomUUID()}`;
  await using run = await launch(["tiny-llama"], {
    env: { LOCAL_ENGINE_API_KEY: key },
  });
  const url = `http://${HOST}:${run.port + 1}`;

  const without = await getJson(`${url}/v1/models`);
  assert.equal(without.status, 401);
  const wrong = await getJson(`${url}/v1/models`, {
    headers: { authorization: "Bearer not-the-key" },
  });
  assert.equal(wrong.status, 401);
  const withKey = await getJson(`${url}/v1/models`, {
    headers: { authorization: `Bearer ${key}` },
  });
  assert.equal(withKey.status, 200);
  const ids = (withKey.body as { data: { id: string }[] }).data.map((m) =>
    m.id
  );
  assert.deepEqual(ids, ["tiny-llama"]);
  const health = await getJson(`${url}/health`);
  assert.equal(health.status, 200);

  // The official client, given the key, streams.
  const stream = await client(`${url}/v1`, key).chat.completions.create({
    model: "tiny-llama",
    messages: HELLO,
    max_tokens: 8,
    stream: true,
  });
  let chunks = 0;
  for await (const _ of stream) chunks++;
  assert.ok(chunks >= 1);

  // The key is passed to the engine but never logged by the launcher.
  assert.ok(!run.launcher.stderr.includes(key), "key absent from stderr");
  const log = await Deno.readTextFile(`${run.root}/logs/tiny-llama.log`);
  const start = log.split("\n").find((l) => l.startsWith("--- ")) ?? "";
  assert.match(start, /--api-key \*\*\*/);
  assert.ok(!start.includes(key));
  await shutdown(run);
});

Deno.test("SIGTERM to the launcher exits 0 and leaves no llama-server behind", async () => {
  await using run = await launch(["tiny-llama"]);
  const { "tiny-llama": pid } = await run.pids();
  assert.ok(pid && pidAlive(pid), "llama-server runs");
  assert.ok(await listening(run.port + 1));
  await shutdown(run);
  assert.match(run.launcher.stderr, /\[serve\] stopped/);
  // llama-server, stopped after it had loaded, exits cleanly by itself.
  const log = await Deno.readTextFile(`${run.root}/logs/tiny-llama.log`);
  assert.match(
    log.trimEnd().split("\n").at(-1) ?? "",
    /exit: code 0 after \d+\.\d s$/,
  );
});

Deno.test("two llama-server engines run side by side on --port + 1 and + 2", async () => {
  await using run = await launch(["tiny-a", "tiny-b"], { catalogue: FIXTURE });
  const { active } = await getModels(run.port);
  assert.deepEqual(Object.keys(active), ["tiny-a", "tiny-b"]);
  assert.equal(active["tiny-a"]?.url, `http://${HOST}:${run.port + 1}/v1`);
  assert.equal(active["tiny-b"]?.url, `http://${HOST}:${run.port + 2}/v1`);
  const pids = await run.pids();
  assert.notEqual(pids["tiny-a"], pids["tiny-b"]);

  await Promise.all(["tiny-a", "tiny-b"].map(async (name) => {
    const openai = client(active[name]?.url ?? "");
    const ids: string[] = [];
    for await (const model of openai.models.list()) ids.push(model.id);
    assert.deepEqual(ids, [name], `each engine serves its own alias`);
    const completion = await openai.chat.completions.create({
      model: name,
      messages: HELLO,
      max_tokens: 8,
    });
    assert.equal(completion.object, "chat.completion");
    assert.equal(completion.choices.length, 1);
    assert.equal(typeof completion.choices[0]?.message.content, "string");
  }));
  await shutdown(run);
});

Deno.test("a llama-server killed with SIGKILL is restarted and answers a chat request again", async () => {
  await using run = await launch(["tiny-a"], { catalogue: FIXTURE });
  const { "tiny-a": first } = await run.pids();
  Deno.kill(first!, "SIGKILL");
  await run.launcher.waitForLine(
    /engine tiny-a \(pid \d+\) exit: signal SIGKILL after .* restart 1 in 1 s/,
  );
  let second: number | undefined;
  await waitFor(
    async () => {
      const { body } = await getJson(
        `http://${HOST}:${run.port}/models?detail=1`,
      );
      const entry = (body as {
        active: Record<string, { healthy: boolean; pid: number | null }>;
      }).active["tiny-a"];
      second = entry?.pid ?? undefined;
      return entry?.healthy === true && second !== first;
    },
    "tiny-a healthy again under a new pid",
    20_000,
  );
  assert.ok(!pidAlive(first!), "the killed server is gone");
  const entry = (await getModels(run.port)).active["tiny-a"]!;
  const reply = await client(entry.url).chat.completions.create({
    model: "tiny-a",
    messages: HELLO,
    max_tokens: 4,
  });
  assert.equal(reply.object, "chat.completion");
  assert.equal(reply.choices.length, 1);
  await run.launcher.stop("SIGTERM");
  assert.ok(!pidAlive(second!), "the restarted server is gone after SIGTERM");
});
