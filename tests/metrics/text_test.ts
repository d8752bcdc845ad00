import assert from "node:assert/strict";
import { get, parse } from "../support/prometheus.ts";
import { hasPromtool, promtool } from "../support/promtool.ts";
import {
  type EngineMetrics,
  type MetricsSnapshot,
  renderMetrics,
} from "../../src/metrics/text.ts";
import { AUTH_FAILURE_REASONS } from "../../src/web/auth_failures.ts";

function engine(overrides: Partial<EngineMetrics> = {}): EngineMetrics {
  return {
    model: "qwen3-8b",
    verb: "chat",
    engine: "vllm",
    port: 5001,
    gpus: ["0"],
    up: true,
    restarts: 0,
    healthPollSeconds: 0.0042,
    startTimeSeconds: 1_700_000_100.25,
    ...overrides,
  };
}

function snapshot(overrides: Partial<MetricsSnapshot> = {}): MetricsSnapshot {
  return {
    launcher: {
      version: "0.1.0",
      mode: "development",
      tls: false,
      port: 8000,
      startTimeSeconds: 1_700_000_000.5,
    },
    engines: [engine()],
    ...overrides,
  };
}

const ENGINE_FAMILIES = [
  ["mymodel_engine_up", "GAUGE"],
  ["mymodel_engine_restarts_total", "COUNTER"],
  ["mymodel_engine_health_poll_seconds", "GAUGE"],
  ["mymodel_engine_start_time_seconds", "GAUGE"],
  ["mymodel_engine_state", "GAUGE"],
  ["mymodel_engine_exits_total", "COUNTER"],
  ["mymodel_engine_load_phase", "GAUGE"],
  ["mymodel_engine_gpu_memory_bytes", "GAUGE"],
  ["mymodel_engine_footprint_bytes", "GAUGE"],
  ["mymodel_engine_kv_cache_tokens", "GAUGE"],
  ["mymodel_engine_requests_running", "GAUGE"],
  ["mymodel_engine_requests_waiting", "GAUGE"],
  ["mymodel_engine_generated_tokens_total", "COUNTER"],
  ["mymodel_engine_start_wait_seconds_total", "COUNTER"],
  ["mymodel_engine_start_seconds", "GAUGE"],
  ["mymodel_engine_start_duration_seconds", "SUMMARY"],
  ["mymodel_engine_recovery_seconds", "GAUGE"],
  ["mymodel_engine_sleeps_total", "COUNTER"],
  ["mymodel_engine_wake_duration_seconds", "SUMMARY"],
  ["mymodel_engine_switch_duration_seconds", "SUMMARY"],
  ["mymodel_engine_made_room_total", "COUNTER"],
  ["mymodel_engine_sleep_residue_bytes", "GAUGE"],
  ["mymodel_engine_requests_cut_total", "COUNTER"],
  ["mymodel_launcher_info", "GAUGE"],
  ["mymodel_launcher_start_time_seconds", "GAUGE"],
  ["mymodel_launcher_start_warnings", "GAUGE"],
  ["mymodel_launcher_stopped", "GAUGE"],
] as const;

Deno.test("renderMetrics gives every family a HELP text and its type", () => {
  const families = parse(renderMetrics(snapshot()));
  for (const [name, type] of ENGINE_FAMILIES) {
    const family = get(families, name);
    assert.equal(family.type, type, name);
    assert.ok(family.help.length > 10, `${name} has no HELP text`);
  }
  assert.equal(families.size, ENGINE_FAMILIES.length);
});

Deno.test("the footprint: bytes of each known part and the total, the KV tokens; unknown parts and no footprint give no sample", () => {
  const families = parse(renderMetrics(snapshot({
    engines: [
      engine({
        footprint: {
          weights_mib: 129.05,
          kv_cache_mib: 16,
          kv_tokens: 256,
          graphs_mib: null,
          compute_mib: 17.01,
          total_mib: 162.06,
          device: "CPU",
          measured_at: "2026-12-01T12:00:00.000Z",
          from: "load lines",
        },
      }),
      engine({ model: "bge-m3", port: 5002, footprint: null }),
    ],
  })));
  const bytes = get(families, "mymodel_engine_footprint_bytes").metrics;
  assert.deepEqual(
    bytes.map((m) => [m.labels?.model, m.labels?.part, Number(m.value)]),
    [
      ["qwen3-8b", "weights", 129.05 * 2 ** 20],
      ["qwen3-8b", "kv_cache", 16 * 2 ** 20],
      ["qwen3-8b", "compute", 17.01 * 2 ** 20],
      ["qwen3-8b", "total", 162.06 * 2 ** 20],
    ],
  );
  assert.deepEqual(get(families, "mymodel_engine_kv_cache_tokens").metrics, [
    { value: "256", labels: { model: "qwen3-8b" } },
  ]);
});

Deno.test("renderMetrics reports each engine's state with its labels", () => {
  const families = parse(renderMetrics(snapshot({
    engines: [
      engine({ gpus: ["0", "1"] }),
      engine({
        model: "bge-m3",
        verb: "embed",
        engine: "llama.cpp",
        port: 5002,
        gpus: ["GPU-8f2c"],
        up: false,
        restarts: 3,
        healthPollSeconds: 2,
        startTimeSeconds: 1_700_000_200,
      }),
    ],
  })));
  assert.deepEqual(get(families, "mymodel_engine_up").metrics, [
    {
      value: "0",
      labels: {
        model: "bge-m3",
        verb: "embed",
        engine: "llama.cpp",
        port: "5002",
        gpus: "GPU-8f2c",
      },
    },
    {
      value: "1",
      labels: {
        model: "qwen3-8b",
        verb: "chat",
        engine: "vllm",
        port: "5001",
        gpus: "0,1",
      },
    },
  ]);
  assert.deepEqual(get(families, "mymodel_engine_restarts_total").metrics, [
    { value: "3", labels: { model: "bge-m3" } },
    { value: "0", labels: { model: "qwen3-8b" } },
  ]);
  assert.deepEqual(
    get(families, "mymodel_engine_health_poll_seconds").metrics,
    [
      { value: "2", labels: { model: "bge-m3" } },
      { value: "0.0042", labels: { model: "qwen3-8b" } },
    ],
  );
  assert.deepEqual(get(families, "mymodel_engine_start_time_seconds").metrics, [
    { value: "1700000200", labels: { model: "bge-m3" } },
    { value: "1700000100.25", labels: { model: "qwen3-8b" } },
  ]);
});

Deno.test("renderMetrics leaves the gpus label empty when nothing was placed", () => {
  const families = parse(renderMetrics(snapshot({
    engines: [
      engine({ model: "a", gpus: [] }),
      engine({ model: "b", gpus: null }),
    ],
  })));
  const up = get(families, "mymodel_engine_up").metrics;
  assert.deepEqual(up.map((m) => m.labels?.gpus), ["", ""]);
});

Deno.test("renderMetrics omits poll and start samples an engine does not have yet", () => {
  const families = parse(renderMetrics(snapshot({
    engines: [
      engine({ model: "loading", healthPollSeconds: undefined }),
      engine({ model: "backoff", startTimeSeconds: undefined, up: false }),
    ],
  })));
  assert.deepEqual(
    get(families, "mymodel_engine_health_poll_seconds").metrics.map((m) =>
      m.labels?.model
    ),
    ["backoff"],
  );
  assert.deepEqual(
    get(families, "mymodel_engine_start_time_seconds").metrics.map((m) =>
      m.labels?.model
    ),
    ["loading"],
  );
  assert.equal(get(families, "mymodel_engine_up").metrics.length, 2);
});

Deno.test("renderMetrics describes the launcher, labelled with its own port", () => {
  const families = parse(renderMetrics(snapshot({
    launcher: {
      version: "1.2.3",
      mode: "production",
      tls: true,
      port: 8443,
      startTimeSeconds: 1_700_000_000.5,
    },
  })));
  assert.deepEqual(get(families, "mymodel_launcher_info").metrics, [
    {
      value: "1",
      labels: {
        port: "8443",
        version: "1.2.3",
        mode: "production",
        tls: "true",
      },
    },
  ]);
  assert.deepEqual(
    get(families, "mymodel_launcher_start_time_seconds").metrics,
    [
      { value: "1700000000.5", labels: { port: "8443" } },
    ],
  );
});

Deno.test("mymodel_launcher_stopped: 0 while the launcher runs, 1 in the file its clean stop leaves", () => {
  const running = parse(renderMetrics(snapshot()));
  assert.deepEqual(get(running, "mymodel_launcher_stopped").metrics, [
    { value: "0", labels: { port: "8000" } },
  ]);
  const base = snapshot();
  const stopped = parse(renderMetrics({
    ...base,
    launcher: { ...base.launcher, stopped: true },
  }));
  assert.deepEqual(get(stopped, "mymodel_launcher_stopped").metrics, [
    { value: "1", labels: { port: "8000" } },
  ]);
});

Deno.test("renderMetrics escapes backslashes, quotes and line feeds in label values", () => {
  const model = 'we\\ird "model"\nname';
  const families = parse(renderMetrics(snapshot({
    engines: [engine({ model, verb: 'v"erb', gpus: ["a\\b"] })],
  })));
  const [up] = get(families, "mymodel_engine_up").metrics;
  assert.equal(up?.labels?.model, model);
  assert.equal(up?.labels?.verb, 'v"erb');
  assert.equal(up?.labels?.gpus, "a\\b");
  assert.equal(
    get(families, "mymodel_engine_restarts_total").metrics[0]?.labels?.model,
    model,
  );
});

Deno.test("renderMetrics counts authentication failures by reason in production only", () => {
  const development = parse(renderMetrics(snapshot({
    authFailures: { signature: 4 },
  })));
  assert.equal(development.has("mymodel_auth_failures_total"), false);

  const production = parse(renderMetrics(snapshot({
    launcher: { ...snapshot().launcher, mode: "production" },
    authFailures: { missing: 2, expired: 1, other: 7 },
  })));
  const family = get(production, "mymodel_auth_failures_total");
  assert.equal(family.type, "COUNTER");
  assert.deepEqual(
    family.metrics.map((m) => [m.labels?.reason, m.labels?.port, m.value]),
    [
      ["missing", "8000", "2"],
      ["malformed", "8000", "0"],
      ["signature", "8000", "0"],
      ["expired", "8000", "1"],
      ["claims", "8000", "0"],
      ["other", "8000", "7"],
    ],
  );
  assert.equal(family.metrics.length, AUTH_FAILURE_REASONS.length);
});

Deno.test("renderMetrics gives the same text whatever the engines' order", () => {
  const engines = [
    engine({ model: "c", port: 5003 }),
    engine({ model: "a", port: 5001 }),
    engine({ model: "b", port: 5002 }),
  ];
  const text = renderMetrics(snapshot({ engines }));
  assert.equal(
    renderMetrics(snapshot({ engines: [...engines].reverse() })),
    text,
  );
  assert.deepEqual(
    get(parse(text), "mymodel_engine_up").metrics.map((m) => m.labels?.model),
    ["a", "b", "c"],
  );
  assert.ok(text.endsWith("\n"));
});

/** Two starts (4 s, then 70 s after a crash). */
const STARTED: Partial<EngineMetrics> = {
  last_start: { seconds: 70, phases: { spawn: 10, loading: 60 } },
  last_recovery: { seconds: 72.5, cause: "gpu-out-of-memory" },
  starts: { count: 2, sum: 74 },
};

Deno.test("renderMetrics gives the last start and recovery, and every start summed and counted", () => {
  const families = parse(renderMetrics(snapshot({
    engines: [engine(STARTED), engine({ model: "new" })],
  })));
  const one = (name: string) =>
    get(families, name).metrics.map((m) => [m.labels?.model, m.value]);
  assert.deepEqual(one("mymodel_engine_start_seconds"), [["qwen3-8b", "70"]]);
  assert.deepEqual(one("mymodel_engine_recovery_seconds"), [[
    "qwen3-8b",
    "72.5",
  ]]);
  const summary = get(families, "mymodel_engine_start_duration_seconds");
  assert.equal(summary.type, "SUMMARY");
  assert.deepEqual(summary.metrics, [
    { labels: { model: "qwen3-8b" }, sum: "74", count: "2" },
  ], "none for an engine never ready");
});

Deno.test({
  name: "renderMetrics output passes promtool check metrics",
  ignore: !hasPromtool,
  async fn() {
    const text = renderMetrics(snapshot({
      launcher: { ...snapshot().launcher, mode: "production", tls: true },
      engines: [
        engine({ model: 'odd "one"\\\n', gpus: ["0", "1"] }),
        engine({ model: "x", gpus: null, healthPollSeconds: undefined }),
        engine({ model: "y", ...STARTED }),
      ],
      authFailures: { claims: 1 },
    }));
    const { success, said } = await promtool(["check", "metrics"], text);
    assert.equal(said.trim(), "", `promtool says:\n${said}\n${text}`);
    assert.ok(success);
  },
});

Deno.test("renderMetrics reports the lifecycle state, GPU memory and start waits", () => {
  const families = parse(renderMetrics(snapshot({
    engines: [engine({
      state: "waiting",
      gpu_memory_mib: { "0": 1024 },
      startWaitSeconds: { "gpu-memory-free": 12.5 },
    })],
  })));
  const states = get(families, "mymodel_engine_state").metrics;
  // failed joined the seven states (issue 29), draining and sleeping the
  // eight (issues 36, 37), waking the ten (issue 54)
  assert.equal(states.length, 11);
  assert.ok(states.some((m) => m.labels?.state === "waking"));
  assert.ok(states.some((m) => m.labels?.state === "draining"));
  assert.ok(states.some((m) => m.labels?.state === "sleeping"));
  assert.deepEqual(
    states.filter((m) => m.value === "1").map((m) => m.labels),
    [{ model: "qwen3-8b", state: "waiting" }],
  );
  assert.deepEqual(get(families, "mymodel_engine_gpu_memory_bytes").metrics, [
    {
      labels: { model: "qwen3-8b", gpu: "0" },
      value: String(1024 * 1024 * 1024),
    },
  ]);
  const waits =
    get(families, "mymodel_engine_start_wait_seconds_total").metrics;
  assert.deepEqual(
    waits.map((m) => [m.labels?.reason, m.value]),
    [["gpu-busy-loading", "0"], ["gpu-memory-release", "0"], [
      "gpu-error",
      "0",
    ], ["gpu-memory-free", "12.5"]],
  );
});

Deno.test("renderMetrics gives the start-up checks' warning count, and no sample when it was not counted", () => {
  const counted = parse(renderMetrics(snapshot({
    launcher: { ...snapshot().launcher, startWarnings: 2 },
  })));
  const samples = get(counted, "mymodel_launcher_start_warnings").metrics;
  assert.deepEqual(samples.map((m) => [m.labels?.port, m.value]), [[
    "8000",
    "2",
  ]]);
  const absent = parse(renderMetrics(snapshot()));
  assert.equal(
    get(absent, "mymodel_launcher_start_warnings").metrics.length,
    0,
  );
});

Deno.test("a sleeper's sleeps, wakes with their seconds and residue bytes; an engine never set to sleep gives no sample", () => {
  const sleep = {
    after_seconds: 600,
    asleep_since: "2026-01-01T00:00:00.000Z",
    residue_bytes: 644_245_094,
    awake_bytes: 23_515_107_737,
    freed_bytes: 22_870_862_643,
    by: "nvidia-smi" as const,
    sleeps: 3,
    wakes: 2,
    wake_seconds_sum: 0.72,
    last_wake_seconds: 0.36,
    woken_by: "itself" as const,
    engine_freed_bytes: null,
    engine_in_use_bytes: null,
    waits_for: null,
    switches: 0,
    switch_seconds_sum: 0,
    last_switch_seconds: null,
    last_made_room: [],
    made_room: 0,
    launcher_sleep_off: null,
    last_wake_check: null,
  };
  const families = parse(renderMetrics(snapshot({
    engines: [engine({ sleep }), engine({ model: "awake", sleep: null })],
  })));
  const samples = (name: string) =>
    get(families, name).metrics.map((m) => [m.labels?.model, m.value]);
  assert.deepEqual(samples("mymodel_engine_sleeps_total"), [["qwen3-8b", "3"]]);
  assert.deepEqual(samples("mymodel_engine_sleep_residue_bytes"), [
    ["qwen3-8b", "644245094"],
  ]);
  assert.match(
    renderMetrics(snapshot({ engines: [engine({ sleep })] })),
    /wake_duration_seconds_sum\{model="qwen3-8b"\} 0\.72\n[^\n]*_count\{model="qwen3-8b"\} 2\n/,
  );
  // Switches and made room are a launcher-woken engine's (vLLM) only.
  assert.deepEqual(
    families.get("mymodel_engine_made_room_total")?.metrics ?? [],
    [],
  );
  const woken = {
    ...sleep,
    woken_by: "launcher" as const,
    switches: 4,
    switch_seconds_sum: 1.5,
    made_room: 2,
  };
  const text = renderMetrics(snapshot({ engines: [engine({ sleep: woken })] }));
  assert.match(
    text,
    /switch_duration_seconds_sum\{model="qwen3-8b"\} 1\.5\n[^\n]*_count\{model="qwen3-8b"\} 4\n/,
  );
  assert.match(text, /^mymodel_engine_made_room_total\{model="qwen3-8b"\} 2$/m);
});

Deno.test("renderMetrics counts exits by cause and gives a starting engine's load phase", () => {
  const families = parse(renderMetrics(snapshot({
    engines: [engine({
      state: "starting",
      exits: { "bad-arguments": 2, exit: 1 },
      phase: "loading",
    })],
  })));
  const exits = get(families, "mymodel_engine_exits_total").metrics;
  // stalled joined the seven causes (issue 36), wake-failed then (issue 53)
  assert.equal(exits.length, 9, "every cause, zeros included");
  assert.deepEqual(
    exits.filter((m) => m.value !== "0").map((m) => [m.labels?.cause, m.value]),
    [["bad-arguments", "2"], ["exit", "1"]],
  );
  assert.deepEqual(get(families, "mymodel_engine_load_phase").metrics, [
    { value: "1", labels: { model: "qwen3-8b", phase: "loading" } },
  ]);
});

Deno.test("renderMetrics gives each engine's running and waiting requests and generated tokens where read", () => {
  const families = parse(renderMetrics(snapshot({
    engines: [
      engine({
        traffic: { running: 3, waiting: 1, tokens_per_s: null, at: "" },
        generatedTokens: 1234,
      }),
      engine({ model: "bge-m3", port: 5002 }),
    ],
  })));
  const of = (name: string) =>
    get(families, name).metrics.map((m) => [m.labels?.model, m.value]);
  assert.deepEqual(of("mymodel_engine_requests_running"), [["qwen3-8b", "3"]]);
  assert.deepEqual(of("mymodel_engine_requests_waiting"), [["qwen3-8b", "1"]]);
  assert.deepEqual(of("mymodel_engine_generated_tokens_total"), [[
    "qwen3-8b",
    "1234",
  ]]);
});

Deno.test("renderMetrics counts each engine's requests cut by a drain's deadline", () => {
  const families = parse(renderMetrics(snapshot({
    engines: [
      engine({ requestsCut: 3 }),
      engine({ model: "bge-m3", port: 5002, requestsCut: 0 }),
    ],
  })));
  const cut = get(families, "mymodel_engine_requests_cut_total");
  assert.equal(cut.type, "COUNTER");
  assert.deepEqual(cut.metrics, [
    { labels: { model: "bge-m3" }, value: "0" },
    { labels: { model: "qwen3-8b" }, value: "3" },
  ]);
});
