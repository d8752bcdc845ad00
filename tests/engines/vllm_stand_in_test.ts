/**
 * The vLLM stand-in (tests/fixtures/vllm_stand_in.ts) behaves as vLLM's
 * source says around sleep, parking and `/load`, over loopback on a stand-in
 * GPU machine (tests/support/fake_gpus.ts).
 */
import assert from "node:assert/strict";
import {
  fakeDevices,
  type FakeGpuMachine,
  fakeGpuMachine,
} from "../support/fake_gpus.ts";
import {
  freePorts,
  healthOk,
  waitFor,
  withinGuard,
} from "../support/helpers.ts";
import { chatStream, streamWhole } from "../support/streams.ts";
import {
  VLLM_STAND_IN,
  vllmServeArgs,
  vllmStandIn,
} from "../support/vllm_stand_in.ts";

interface StandIn extends AsyncDisposable {
  port: number;
  base: string;
  /** Everything it printed so far, stdout and stderr. */
  out(): string;
  stderr(): string;
  status: Promise<Deno.CommandStatus>;
  get(path: string, key?: string): Promise<Response>;
  post(path: string, body?: unknown, key?: string): Promise<Response>;
}

const FAST = ["--fake-load-ms", "50", "--fake-sleep-ms", "20"];

/** Starts the stand-in (`serve org/m --served-model-name m …`) on the machine's GPU 0. */
function start(
  gpus: FakeGpuMachine | undefined,
  flags: string[],
  env: Record<string, string> = { VLLM_SERVER_DEV_MODE: "1" },
): StandIn {
  const port = freePorts(1);
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      VLLM_STAND_IN,
      ...vllmServeArgs(port),
      ...FAST,
      ...flags,
    ],
    env: {
      ...(gpus ? { ...gpus.env, CUDA_VISIBLE_DEVICES: "0" } : {}),
      ...env,
    },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let out = "";
  let err = "";
  const decoder = () => new TextDecoder();
  const drain = async (
    stream: ReadableStream<Uint8Array>,
    add: (s: string) => void,
  ) => {
    const d = decoder();
    for await (const chunk of stream) add(d.decode(chunk, { stream: true }));
  };
  const drained = Promise.all([
    drain(child.stdout, (s) => out += s),
    drain(child.stderr, (s) => {
      out += s;
      err += s;
    }),
  ]);
  const base = `http://127.0.0.1:${port}`;
  const auth = (key?: string): Record<string, string> =>
    key ? { authorization: `Bearer ${key}` } : {};
  const status = child.status;
  return {
    port,
    base,
    out: () => out,
    stderr: () => err,
    status,
    get: (path, key) => fetch(`${base}${path}`, { headers: auth(key) }),
    post: (path, body, key) =>
      fetch(`${base}${path}`, {
        method: "POST",
        headers: auth(key),
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      }),
    async [Symbol.asyncDispose]() {
      try {
        child.kill("SIGKILL");
      } catch {
        // Already gone.
      }
      await status;
      await drained;
    },
  };
}

async function json(response: Promise<Response>): Promise<unknown> {
  return await (await response).json();
}
async function code(response: Promise<Response>): Promise<number> {
  const r = await response;
  await r.body?.cancel();
  return r.status;
}
async function load(vllm: StandIn): Promise<number> {
  const body = await json(vllm.get("/load")) as { server_load: number };
  return body.server_load;
}
async function gauges(vllm: StandIn): Promise<[number, number]> {
  const text = await (await vllm.get("/metrics")).text();
  const value = (name: string) =>
    Number(text.match(new RegExp(`^vllm:${name}\\{[^}]*\\} (\\S+)$`, "m"))![1]);
  return [value("num_requests_running"), value("num_requests_waiting")];
}
async function held(gpus: FakeGpuMachine, pid: number): Promise<number> {
  return (await gpus.procs()).get(pid)?.mib ?? -1;
}
function chat(vllm: StandIn, key?: string): Promise<Response> {
  return vllm.post("/v1/chat/completions", {
    messages: [{ role: "user", content: "one two" }],
  }, key);
}
const up = (vllm: StandIn) =>
  waitFor(() => healthOk(vllm.base), "the stand-in listening");
const pidOf = (vllm: StandIn) =>
  Number(vllm.out().match(/\(APIServer pid=(\d+)\)/)![1]);

Deno.test("a request sent while asleep is parked: /load counts it, the gauges do not, it completes after the wake", async () => {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(1) });
  await using vllm = start(gpus, [
    "--enable-sleep-mode",
    "--enable-server-load-tracking",
    "--fake-awake-mib",
    "30000",
    "--fake-residue-mib",
    "1434",
  ]);
  await up(vllm);
  const pid = pidOf(vllm);
  assert.equal(await held(gpus, pid), 30000);
  assert.equal(await code(vllm.post("/sleep?level=1&mode=wait")), 200);
  assert.deepEqual(await json(vllm.get("/is_sleeping")), { is_sleeping: true });
  assert.equal(await held(gpus, pid), 1434);
  assert.match(
    vllm.out(),
    /\(EngineCore_DP0 pid=\d+\) INFO \d\d-\d\d \d\d:\d\d:\d\d \[v1\/worker\/gpu_worker\.py:\d+\] Sleep mode freed 27\.90 GiB memory, 1\.40 GiB memory is still in use\./,
  );
  assert.match(vllm.out(), /It took \d+\.\d{6} seconds to fall asleep\./);

  const parked = chat(vllm);
  await waitFor(async () => await load(vllm) === 1, "/load counting it");
  assert.deepEqual(await gauges(vllm), [0, 0]);
  const raced = await Promise.race([
    parked.then(() => "answered"),
    new Promise((r) => setTimeout(() => r("parked"), 300)),
  ]);
  assert.equal(raced, "parked");

  assert.equal(await code(vllm.post("/wake_up")), 200);
  assert.equal(await held(gpus, pid), 30000);
  assert.match(
    vllm.out(),
    /wake up the engine with tags: None[\s\S]*It took \d+\.\d{6} seconds to wake up tags \{'weights', 'kv_cache'\}\./,
  );
  const body = await (await withinGuard(parked, "the parked request")).json();
  assert.equal(body.choices[0].finish_reason, "length");
  assert.equal(body.usage.completion_tokens, 8);
  await waitFor(async () => await load(vllm) === 0, "/load back to 0");
  assert.deepEqual(await json(vllm.get("/is_sleeping")), {
    is_sleeping: false,
  });
});

Deno.test("/load counts a stream until its last chunk, and reads 0 without --enable-server-load-tracking", async () => {
  await using tracked = start(undefined, [
    "--enable-server-load-tracking",
    "--fake-tokens",
    "12",
    "--fake-token-ms",
    "40",
  ]);
  await using untracked = start(undefined, []);
  await up(tracked);
  await up(untracked);
  const stream = chatStream(tracked.port);
  await waitFor(() => stream.tokens >= 2, "the first tokens");
  assert.equal(await load(tracked), 1);
  assert.deepEqual(await gauges(tracked), [1, 0]);
  const { text } = await withinGuard(stream.done, "the stream");
  assert.ok(streamWhole(text, 12), text);
  await waitFor(async () => await load(tracked) === 0, "the −1 at its end");

  const other = chatStream(untracked.port);
  await waitFor(() => other.tokens >= 1, "a token");
  assert.deepEqual(await json(untracked.get("/load")), { server_load: 0 });
  await other.done;
});

Deno.test("the dev routes are 404 without VLLM_SERVER_DEV_MODE", async () => {
  await using vllm = start(undefined, ["--enable-sleep-mode"], {});
  await up(vllm);
  for (const path of ["/sleep?level=1", "/wake_up", "/collective_rpc"]) {
    const response = await vllm.post(path);
    assert.equal(response.status, 404, path);
    assert.deepEqual(await response.json(), { detail: "Not Found" });
  }
  assert.equal(await code(vllm.get("/is_sleeping")), 404);
  assert.doesNotMatch(vllm.out(), /SECURITY WARNING/);
});

Deno.test("--api-key: released builds guard /v1, not the dev routes nor /load; route-table guards the dev routes; v1-only guards /v1", async () => {
  const key = "k-123";
  await using released = start(undefined, ["--api-key", key]);
  await using table = start(undefined, [
    "--api-key",
    key,
    "--fake-auth",
    "route-table",
  ]);
  await using old = start(undefined, [
    "--api-key",
    key,
    "--fake-auth",
    "v1-only",
  ]);
  for (const vllm of [released, table, old]) await up(vllm);
  for (const vllm of [released, table, old]) {
    const refused = await chat(vllm);
    assert.equal(refused.status, 401);
    assert.deepEqual(await refused.json(), { error: "Unauthorized" });
    assert.equal(await code(chat(vllm, key)), 200);
    assert.equal(await code(vllm.get("/v1/models")), 401);
    for (const path of ["/health", "/load", "/metrics", "/version"]) {
      assert.equal(await code(vllm.get(path)), 200, path);
    }
  }
  assert.equal(await code(released.get("/is_sleeping")), 200);
  assert.equal(await code(old.get("/is_sleeping")), 200);
  assert.equal(await code(table.get("/is_sleeping")), 401);
  assert.equal(await code(table.post("/sleep?level=1")), 401);
  assert.equal(await code(table.get("/is_sleeping", key)), 200);
  // The released guard let the sleep through without the key.
  assert.equal(await code(released.post("/sleep?level=1")), 200);
  assert.deepEqual(await json(released.get("/is_sleeping")), {
    is_sleeping: true,
  });
});

Deno.test("a wake that does not fit answers 500 with CUDA's out of memory, the engine stays asleep, and a wake with room succeeds", async () => {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(1, 40000) });
  await using vllm = start(gpus, [
    "--enable-sleep-mode",
    "--enable-server-load-tracking",
    "--gpu-memory-utilization",
    "0.5",
    "--fake-awake-mib",
    "20000",
  ]);
  await up(vllm);
  const pid = pidOf(vllm);
  assert.equal(await code(vllm.post("/sleep?level=1")), 200);
  const parked = chat(vllm);
  await waitFor(async () => await load(vllm) === 1, "the parked request");
  // Another job takes the room the sleeper freed.
  await gpus.addForeign("job", { pid: 4242, gpu: "0", mib: 30000 });
  const refused = await vllm.post("/wake_up");
  assert.equal(refused.status, 500);
  assert.deepEqual(await refused.json(), {
    error: {
      message:
        "Call to wake_up method failed: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:163",
      type: "InternalServerError",
      param: null,
      code: 500,
    },
  });
  assert.match(vllm.stderr(), /^CUDA Error: out of memory at /m);
  assert.match(
    vllm.out(),
    /ERROR .*\[v1\/engine\/core\.py:\d+\] Invocation of wake_up method failed/,
  );
  assert.ok(await healthOk(vllm.base));
  assert.deepEqual(await json(vllm.get("/is_sleeping")), { is_sleeping: true });
  assert.equal(await held(gpus, pid), 1434);
  assert.equal(await load(vllm), 1);

  await gpus.removeForeign("job");
  assert.equal(await code(vllm.post("/wake_up")), 200);
  assert.equal(await held(gpus, pid), 20000);
  assert.equal(
    (await (await withinGuard(parked, "the parked request")).json()).choices[0]
      .finish_reason,
    "length",
  );
});

Deno.test("a start on a device without gpu_memory_utilization × total free is refused with vLLM's words and exit 1", async () => {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(1, 81920) });
  await gpus.addForeign("job", { pid: 4242, gpu: "0", mib: 20480 });
  await using vllm = start(gpus, ["--gpu-memory-utilization", "0.9"]);
  const status = await withinGuard(vllm.status, "the refusal");
  assert.equal(status.code, 1);
  assert.match(
    vllm.stderr(),
    /ValueError: Free memory on device cuda:0 \(60\.0\/80\.0 GiB\) on startup is less than desired GPU memory utilization \(0\.9, 72\.0 GiB\)\. Decrease GPU memory utilization or reduce GPU memory used by other processes\./,
  );
  assert.match(
    vllm.stderr(),
    /RuntimeError: Engine core initialization failed/,
  );
  assert.equal((await gpus.procs()).size, 0);
});

Deno.test("sleep modes: abort ends the requests in flight as aborted, an unknown mode is a 500, without --enable-sleep-mode nothing is freed", async () => {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(1) });
  await using vllm = start(gpus, [
    "--fake-awake-mib",
    "30000",
    "--fake-tokens",
    "50",
    "--fake-token-ms",
    "40",
  ]);
  await up(vllm);
  const pid = pidOf(vllm);
  const bad = await vllm.post("/sleep?level=1&mode=later");
  assert.equal(bad.status, 500);
  assert.equal(
    (await bad.json()).error.message,
    "Call to sleep method failed: Invalid pause mode: later",
  );
  const stream = chatStream(vllm.port);
  await waitFor(() => stream.tokens >= 1, "a token");
  assert.equal(await code(vllm.post("/sleep?level=1")), 200);
  const { text } = await withinGuard(stream.done, "the aborted stream");
  assert.match(text, /"finish_reason":"abort"/);
  assert.ok(stream.tokens < 50);
  assert.match(vllm.out(), /Sleep mode freed 0\.00 GiB memory/);
  assert.equal(await held(gpus, pid), 30000);
});

Deno.test("--fake-no-mode: an older build steps a request on freed memory, the engine core dies and the server exits 0", async () => {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(1) });
  await using vllm = start(gpus, ["--fake-no-mode", "--enable-sleep-mode"]);
  await up(vllm);
  // The unknown `mode` is ignored, and nothing pauses.
  assert.equal(await code(vllm.post("/sleep?level=1&mode=wait")), 200);
  const request = chat(vllm);
  const status = await withinGuard(vllm.status, "the exit");
  assert.equal(status.code, 0);
  assert.equal((await request).status, 500);
  assert.match(
    vllm.out(),
    /CUDA error: an illegal memory access was encountered/,
  );
  assert.match(vllm.out(), /EngineDeadError/);
  const entries = [...(await gpus.procs()).values()];
  assert.ok(entries.every((proc) => proc.goneAt !== undefined));
});

Deno.test("SIGTERM: the stand-in exits 0 and notes its exit in the ledger; vllmStandIn() runs it as an executable", async () => {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(1) });
  await using exe = await vllmStandIn();
  const port = freePorts(1);
  const child = new Deno.Command(exe.executable, {
    args: [...vllmServeArgs(port), "--fake-load-ms", "50"],
    env: { ...gpus.env, CUDA_VISIBLE_DEVICES: "0" },
    stdout: "null",
    stderr: "null",
  }).spawn();
  await waitFor(() => healthOk(`http://127.0.0.1:${port}`), "listening");
  const models = await (await fetch(`http://127.0.0.1:${port}/v1/models`))
    .json();
  assert.equal(models.data[0].id, "m");
  const [entry] = [...(await gpus.procs()).values()];
  assert.ok(entry && entry.goneAt === undefined);
  child.kill("SIGTERM");
  assert.equal((await child.status).code, 0);
  const after = (await gpus.procs()).get(entry.pid);
  assert.ok(after?.goneAt !== undefined);
});

Deno.test("mode=wait drains the running requests first (one arriving meanwhile is published as waiting); keep freezes them until the wake", async () => {
  await using vllm = start(undefined, [
    "--enable-sleep-mode",
    "--enable-server-load-tracking",
    "--fake-tokens",
    "10",
    "--fake-token-ms",
    "40",
  ]);
  await up(vllm);
  const first = chatStream(vllm.port);
  await waitFor(() => first.tokens >= 1, "a token");
  const asleep = vllm.post("/sleep?level=1&mode=wait");
  await waitFor(
    () => vllm.out().includes("Waiting for in-flight requests to complete"),
    "the drain",
  );
  const late = chat(vllm);
  await waitFor(async () => await load(vllm) === 2, "both counted");
  assert.equal(await code(asleep), 200);
  assert.ok(streamWhole((await first.done).text, 10));
  // The drain's last step published the late one as waiting; nothing steps since.
  assert.deepEqual(await gauges(vllm), [0, 1]);
  assert.equal(await code(vllm.post("/wake_up")), 200);
  assert.equal((await (await late).json()).usage.completion_tokens, 10);

  const frozen = chatStream(vllm.port);
  await waitFor(() => frozen.tokens >= 2, "two tokens");
  assert.equal(await code(vllm.post("/sleep?level=1&mode=keep")), 200);
  const kept = frozen.tokens;
  await new Promise((resolve) => setTimeout(resolve, 200));
  assert.equal(frozen.tokens, kept);
  assert.ok(kept < 10);
  assert.equal(await code(vllm.post("/wake_up")), 200);
  assert.ok(streamWhole((await frozen.done).text, 10));
});

Deno.test("a wake by tags maps that part back and keeps the scheduler paused until no tag sleeps", async () => {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(1) });
  await using vllm = start(gpus, [
    "--enable-sleep-mode",
    "--fake-awake-mib",
    "21434",
    "--fake-residue-mib",
    "1434",
    "--fake-weights-mib",
    "8000",
  ]);
  await up(vllm);
  const pid = pidOf(vllm);
  assert.equal(await code(vllm.post("/sleep?level=1")), 200);
  assert.equal(await code(vllm.post("/wake_up?tags=weights")), 200);
  assert.equal(await held(gpus, pid), 9434);
  assert.deepEqual(await json(vllm.get("/is_sleeping")), { is_sleeping: true });
  assert.match(vllm.out(), /seconds to wake up tags \['weights'\]\./);
  assert.equal(await code(vllm.post("/wake_up?tags=kv_cache")), 200);
  assert.equal(await held(gpus, pid), 21434);
  assert.deepEqual(await json(vllm.get("/is_sleeping")), {
    is_sleeping: false,
  });
  assert.equal(await code(chat(vllm)), 200);
  const rpc = await vllm.post("/collective_rpc", {});
  assert.equal(rpc.status, 400);
  assert.deepEqual(await rpc.json(), {
    detail: "Missing 'method' in request body",
  });
});
