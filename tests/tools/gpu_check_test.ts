/**
 * `deno task gpu-check` (tools/gpu_check.ts) against the stand-ins: every
 * scenario passes through the real CLI; a deliberately failed scenario leaves
 * no process behind and the others still run; without `nvidia-smi` it exits 3
 * with one line. Each run gets its own TMPDIR, which must be empty of all but
 * the report afterwards, and no process may still carry it.
 *
 * Also tools/gpu_engine.py, the real check's engine, where python3 is here
 * (without `--hold-mib` it imports no PyTorch): its load, crash and SIGTERM
 * behaviours, and vLLM's sleep routes as the vLLM stand-in has them.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { isLlamaServerBuilt } from "../../tools/llama_server.ts";
import { processesWithEnv } from "../support/fake_gpus.ts";
import { freePorts, pidAlive, waitFor } from "../support/helpers.ts";
import { vllmServeArgs } from "../support/vllm_stand_in.ts";

const CHECK = fileURLToPath(
  new URL("../../tools/gpu_check.ts", import.meta.url),
);
const ENGINE = fileURLToPath(
  new URL("../../tools/gpu_engine.py", import.meta.url),
);

interface CheckRun {
  code: number;
  stdout: string;
  stderr: string;
  report: string | undefined;
  /** What the run left in its TMPDIR besides the report. */
  left: string[];
  /** Live processes whose environment names its TMPDIR. */
  running: number[];
}

/** Runs the check with `args` (and `--report` inside a fresh TMPDIR unless `report` is false). */
async function runCheck(
  args: string[],
  env: Record<string, string> = {},
  report = true,
): Promise<CheckRun> {
  const tmp = await Deno.makeTempDir({ prefix: "serve-gpucheck-" });
  try {
    const reportPath = `${tmp}/report.md`;
    const output = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        CHECK,
        ...args,
        ...(report ? ["--report", reportPath] : []),
      ],
      env: { NO_COLOR: "1", TMPDIR: tmp, ...env },
      stdin: "null",
    }).output();
    const decode = (b: Uint8Array) => new TextDecoder().decode(b);
    const text = await Deno.readTextFile(reportPath).catch(() => undefined);
    const left = [...Deno.readDirSync(tmp)].map((e) => e.name).filter((n) =>
      n !== "report.md"
    );
    return {
      code: output.code,
      stdout: decode(output.stdout),
      stderr: decode(output.stderr),
      report: text,
      left,
      running: await processesWithEnv(`TMPDIR=${tmp}`),
    };
  } finally {
    await Deno.remove(tmp, { recursive: true });
  }
}

/** The report's scenario rows: id → result. */
function rows(report: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const match of report.matchAll(/^\| .*\(`([a-z-]+)`\) \| (\w+) \|/gm)) {
    out.set(match[1]!, match[2]!);
  }
  return out;
}

Deno.test("gpu-check --stand-in: every scenario passes through the real CLI, and says it is no GPU measurement", async () => {
  // Three parts at once, each its own CLI run: the suite's longest file ends sooner.
  const halves = await Promise.all([
    "shares,crash-during-load,foreign-holder,launcher-killed,llama-cuda",
    "llama-packing,container-release,gpu-error,device-ids,quiet-neighbour",
    "vllm-switch",
  ].map((only) => runCheck(["--stand-in", "--crashes", "3", "--only", only])));
  for (const half of halves) {
    assert.equal(half.code, 0, half.stdout + half.stderr);
    assert.ok(half.report, "a report");
    assert.match(half.report, /^# GPU check — stand-in run \(no GPU\)/);
    assert.match(half.report, /\*\*Not a GPU measurement\.\*\*/);
    assert.match(half.report, /compute-app pids visible: yes/);
    assert.deepEqual(half.left, [], "the check removed its temp folders");
    assert.deepEqual(half.running, [], "no process left running");
  }
  const run = halves[0]!;
  const llama = isLlamaServerBuilt() ? "PASS" : "SKIP";
  assert.deepEqual(
    Object.fromEntries(halves.flatMap((half) => [...rows(half.report!)])),
    {
      shares: "PASS",
      "crash-during-load": "PASS",
      "foreign-holder": "PASS",
      "launcher-killed": "PASS",
      "llama-cuda": llama,
      "llama-packing": "PASS",
      "vllm-switch": "PASS",
      "container-release": "PASS",
      "gpu-error": "PASS",
      "device-ids": "PASS",
      "quiet-neighbour": "PASS",
    },
    run.report,
  );
  // Three crashes, each restarted only after the dead pid left the stand-in's
  // list (the scenario's own PASS above); the release was seen to take time.
  // Its length is not asserted: polls on a loaded machine blur it (1.34 s was
  // once seen for the stand-in's 1.5 s).
  const release =
    /\| exit → nvidia-smi no longer lists the pid \(release\) \| ([\d.]+) \//
      .exec(run.report!);
  assert.ok(release, run.report);
  assert.ok(Number(release[1]) > 0, `release min ${release[1]} s`);
});

Deno.test("gpu-check: a deliberately failed scenario says what it expected and saw, leaves no engine behind, and the others still run", async () => {
  const run = await runCheck([
    "--stand-in",
    "--only",
    "shares,launcher-killed",
    "--break",
    "shares",
  ]);
  assert.equal(run.code, 1, run.stdout + run.stderr);
  assert.match(
    run.stdout,
    /^FAIL shares: expected a failure \(--break\); saw the scenario's own expectations all met$/m,
  );
  assert.match(run.stdout, /^PASS launcher-killed: /m);
  assert.deepEqual(
    Object.fromEntries(rows(run.report ?? "")),
    { shares: "FAIL", "launcher-killed": "PASS" },
  );
  assert.doesNotMatch(run.report ?? "", /left behind/);
  assert.deepEqual(run.left, []);
  assert.deepEqual(run.running, [], "no engine left running");
});

Deno.test("gpu-check without nvidia-smi exits 3 with one line and writes nothing; bad input exits 2 with one line", async () => {
  const empty = await Deno.makeTempDir({ prefix: "serve-nopath-" });
  try {
    const run = await runCheck([], { PATH: empty });
    assert.equal(run.code, 3);
    assert.equal(
      run.stderr,
      "gpu-check: no NVIDIA GPU here (nvidia-smi is not on PATH); run it on a machine with one, or use --stand-in\n",
    );
    assert.equal(run.report, undefined);
  } finally {
    await Deno.remove(empty, { recursive: true });
  }
  const bad = await runCheck(["--stand-in"], {}, false);
  assert.equal(bad.code, 2);
  assert.equal(
    bad.stderr,
    "gpu-check: --stand-in needs --report PATH (bench/results/gpu.md is for a real GPU's report)\n",
  );
  const unknown = await runCheck(["--stand-in", "--only", "nope"]);
  assert.equal(unknown.code, 2);
  assert.match(
    unknown.stderr,
    /^gpu-check: --only: no scenario 'nope' \(expected shares, /,
  );
});

/** Whether python3 runs here. */
function hasPython(): boolean {
  try {
    return new Deno.Command("python3", {
      args: ["--version"],
      stdout: "null",
      stderr: "null",
    }).outputSync().success;
  } catch {
    return false;
  }
}

Deno.test({
  name:
    "tools/gpu_engine.py: 503 while loading, then 200; its record; SIGTERM ignored on request; exit 3 after --crash-after-ms",
  ignore: !hasPython(),
  async fn() {
    const records = await Deno.makeTempDir({ prefix: "serve-gpuengine-" });
    const port = freePorts(1);
    const start = (extra: string[]) =>
      new Deno.Command("python3", {
        args: [
          ENGINE,
          ...vllmServeArgs(port, "m"),
          ...extra,
        ],
        env: { GPU_ENGINE_RECORD_DIR: records },
        stdin: "null",
        stdout: "null",
        stderr: "piped",
      }).spawn();
    const health = () =>
      fetch(`http://127.0.0.1:${port}/health`).then(async (r) => {
        await r.body?.cancel();
        return r.status;
      }).catch(() => 0);
    try {
      const engine = start(["--load-ms", "1500", "--ignore-sigterm"]);
      await waitFor(async () => (await health()) === 503, "503 while loading");
      await waitFor(async () => (await health()) === 200, "200 once loaded");
      const record = JSON.parse(
        await Deno.readTextFile(`${records}/${port}.json`),
      );
      assert.equal(record.pid, engine.pid);
      assert.ok(record.readyAt - record.allocatedAt >= 1500);
      engine.kill("SIGTERM");
      await new Promise((r) => setTimeout(r, 300));
      assert.ok(pidAlive(engine.pid), "SIGTERM ignored");
      engine.kill("SIGKILL");
      await engine.stderr.cancel();
      await engine.status;

      const crashing = start(["--crash-after-ms", "300"]);
      await crashing.stderr.cancel();
      const status = await crashing.status;
      assert.equal(status.code, 3);
    } finally {
      await Deno.remove(records, { recursive: true });
    }
  },
});

Deno.test({
  name:
    "tools/gpu_engine.py sleeps as vLLM does: dev routes only in dev mode, a request while asleep parks and counts in /load (not in the running gauge), the wake runs it, a bad mode answers 500",
  ignore: !hasPython(),
  async fn() {
    const port = freePorts(1);
    const origin = `http://127.0.0.1:${port}`;
    const start = (env: Record<string, string>) =>
      new Deno.Command("python3", {
        args: [
          ENGINE,
          ...vllmServeArgs(port),
          "--enable-sleep-mode",
          "--enable-server-load-tracking",
          "--token-ms",
          "20",
        ],
        env,
        stdin: "null",
        stdout: "piped",
        stderr: "null",
      }).spawn();
    const ask = async (path: string, post = false) => {
      const r = await fetch(origin + path, { method: post ? "POST" : "GET" });
      return { status: r.status, text: await r.text() };
    };
    const up = async () =>
      await waitFor(
        async () =>
          (await ask("/health").catch(() => ({ status: 0 }))).status === 200,
        "listening",
      );
    const stop = async (engine: Deno.ChildProcess) => {
      engine.kill("SIGKILL");
      const out = new TextDecoder().decode((await engine.output()).stdout);
      return out;
    };

    const plain = start({});
    await up();
    assert.equal((await ask("/sleep?level=1", true)).status, 404);
    assert.equal((await ask("/is_sleeping")).status, 404);
    await stop(plain);

    const engine = start({ VLLM_SERVER_DEV_MODE: "1" });
    try {
      await up();
      assert.deepEqual(JSON.parse((await ask("/version")).text), {
        version: "0.17.0",
      });
      assert.equal((await ask("/sleep?level=1&mode=wait", true)).status, 200);
      assert.deepEqual(JSON.parse((await ask("/is_sleeping")).text), {
        is_sleeping: true,
      });
      const parked = fetch(`${origin}/v1/chat/completions`, {
        method: "POST",
        body: JSON.stringify({ max_tokens: 3, stream: true }),
      }).then((r) => r.text());
      await waitFor(
        async () => JSON.parse((await ask("/load")).text).server_load === 1,
        "the parked request in /load",
      );
      assert.match(
        (await ask("/metrics")).text,
        /^vllm:num_requests_running\{[^}]*\} 0\.0$/m,
      );
      assert.equal((await ask("/wake_up", true)).status, 200);
      const text = await parked;
      assert.match(text, / t2/);
      assert.match(text, /data: \[DONE\]/);
      assert.equal(JSON.parse((await ask("/load")).text).server_load, 0);
      const bad = await ask("/sleep?level=1&mode=later", true);
      assert.equal(bad.status, 500);
      assert.equal(
        JSON.parse(bad.text).error.message,
        "Call to sleep method failed: Invalid pause mode: later",
      );
    } finally {
      const out = await stop(engine);
      assert.match(out, /Sleep mode freed 0\.00 GiB memory/);
      assert.match(out, /It took \S+ seconds to wake up tags/);
    }
  },
});
