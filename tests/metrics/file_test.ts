import assert from "node:assert/strict";
import parsePrometheusTextFormat from "parse-prometheus-text-format";
import { configureLogging, type LogLevel } from "../../src/common/log.ts";
import {
  metricsFilePath,
  MetricsWriter,
  writeMetricsFile,
} from "../../src/metrics/file.ts";
import type { MetricsSnapshot } from "../../src/metrics/text.ts";
import { makeRoot } from "../support/helpers.ts";

const logged: [LogLevel, string][] = [];
configureLogging({
  level: "debug",
  sink: (level, message) => logged.push([level, message]),
});

function snapshot(restarts: number): MetricsSnapshot {
  return {
    launcher: {
      version: "0.1.0",
      mode: "development",
      tls: false,
      port: 8000,
      startTimeSeconds: 1_700_000_000,
    },
    engines: [{
      model: "m",
      verb: "chat",
      engine: "vllm",
      port: 5001,
      gpus: null,
      up: true,
      restarts,
    }],
  };
}

/** The restart count the metrics file at `path` reports, read with a real parser. */
async function restartsIn(path: string): Promise<number> {
  const families = parsePrometheusTextFormat(
    await Deno.readTextFile(path),
  ) as { name: string; metrics: { value: string }[] }[];
  const family = families.find((f) =>
    f.name === "mymodel_engine_restarts_total"
  );
  assert.ok(family, "mymodel_engine_restarts_total is missing");
  return Number(family.metrics[0]?.value);
}

async function names(directory: string): Promise<string[]> {
  return (await Array.fromAsync(Deno.readDir(directory))).map((e) => e.name)
    .sort();
}

/** A write that waits until the test lets it finish, and records each call. */
function gatedWrite() {
  const calls: { text: string; release: () => void }[] = [];
  let running = 0;
  let most = 0;
  async function write(
    directory: string,
    port: number,
    text: string,
  ): Promise<void> {
    running++;
    most = Math.max(most, running);
    const { promise, resolve } = Promise.withResolvers<void>();
    calls.push({ text, release: resolve });
    await promise;
    await writeMetricsFile(directory, port, text);
    running--;
  }
  return { write, calls, most: () => most };
}

async function until(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !condition(); i++) {
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  assert.ok(condition(), "condition never held");
}

Deno.test("writeMetricsFile replaces the file and leaves no temporary file", async () => {
  const root = await makeRoot(["metrics"]);
  try {
    await writeMetricsFile(root, 8000, "# TYPE a gauge\na 1\n");
    await writeMetricsFile(root, 8000, "# TYPE a gauge\na 2\n");
    assert.equal(
      await Deno.readTextFile(`${root}/metrics/mymodel_serve_8000.prom`),
      "# TYPE a gauge\na 2\n",
    );
    assert.deepEqual(await names(`${root}/metrics`), [
      "mymodel_serve_8000.prom",
    ]);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("writeMetricsFile never follows a link planted at a temporary name: the file it points at stays as it was", async () => {
  const root = await makeRoot(["metrics"]);
  try {
    const dir = `${root}/metrics`;
    await Deno.writeTextFile(`${root}/victim`, "precious\n");
    // The names it used to take: `.mymodel_serve_<port>.prom.<pid>.<n>.tmp`.
    for (let n = 1; n <= 100; n++) {
      await Deno.symlink(
        `${root}/victim`,
        `${dir}/.mymodel_serve_8000.prom.${Deno.pid}.${n}.tmp`,
      );
    }
    for (let n = 1; n <= 3; n++) {
      await writeMetricsFile(root, 8000, `# TYPE a gauge\na ${n}\n`);
    }
    assert.equal(await Deno.readTextFile(`${root}/victim`), "precious\n");
    assert.equal(
      await Deno.readTextFile(metricsFilePath(root, 8000)),
      "# TYPE a gauge\na 3\n",
    );
    assert.ok((await Deno.lstat(metricsFilePath(root, 8000))).isFile);
    const left = await names(dir);
    assert.equal(left.length, 101, "the links and the file, nothing else");
    assert.ok(left.includes("mymodel_serve_8000.prom"));
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("writeMetricsFile removes its temporary file when the rename fails", async () => {
  const root = await makeRoot(["metrics"]);
  try {
    // A non-empty directory where the file should be: the rename must fail.
    await Deno.mkdir(`${metricsFilePath(root, 8000)}/blocker`, {
      recursive: true,
    });
    await assert.rejects(writeMetricsFile(root, 8000, "a 1\n"));
    assert.deepEqual(await names(`${root}/metrics`), [
      "mymodel_serve_8000.prom",
    ]);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("MetricsWriter close removes the file and accepts one already gone", async () => {
  const root = await makeRoot(["metrics"]);
  try {
    await writeMetricsFile(root, 8001, "a 1\n");
    await new MetricsWriter(root, 8001).close();
    assert.deepEqual(await names(`${root}/metrics`), []);
    logged.length = 0;
    await new MetricsWriter(root, 8001).close();
    assert.deepEqual(logged, []);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("MetricsWriter writes one file at a time and only the latest of a burst", async () => {
  const root = await makeRoot(["metrics"]);
  const gate = gatedWrite();
  try {
    await using writer = new MetricsWriter(root, 8000, { write: gate.write });
    writer.update(snapshot(1));
    await until(() => gate.calls.length === 1);
    for (let n = 2; n <= 50; n++) writer.update(snapshot(n));
    gate.calls[0]?.release();
    await until(() => gate.calls.length === 2);
    gate.calls[1]?.release();
    await writer.idle();
    assert.equal(gate.calls.length, 2);
    assert.equal(gate.most(), 1);
    assert.equal(await restartsIn(writer.path), 50);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("MetricsWriter logs a failed write once and recovers on a later update", async () => {
  const root = await makeRoot(["metrics"]);
  logged.length = 0;
  try {
    await using writer = new MetricsWriter(root, 8000);
    writer.update(snapshot(1));
    await writer.idle();
    assert.equal(await restartsIn(writer.path), 1);

    await Deno.remove(`${root}/metrics`, { recursive: true });
    writer.update(snapshot(2));
    await writer.idle();
    writer.update(snapshot(3));
    await writer.idle();
    const warnings = logged.filter(([level]) => level === "warn");
    assert.equal(warnings.length, 1, JSON.stringify(logged));
    assert.match(warnings[0]?.[1] ?? "", /^Cannot write metrics file .*8000/);

    await Deno.mkdir(`${root}/metrics`);
    writer.update(snapshot(4));
    await writer.idle();
    assert.equal(await restartsIn(writer.path), 4);
    assert.deepEqual(await names(`${root}/metrics`), [
      "mymodel_serve_8000.prom",
    ]);
    assert.ok(logged.some(([, m]) => m.includes("works again")));
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("MetricsWriter close waits for the write in flight, then removes the file", async () => {
  const root = await makeRoot(["metrics"]);
  const gate = gatedWrite();
  try {
    const writer = new MetricsWriter(root, 8000, { write: gate.write });
    writer.update(snapshot(1));
    await until(() => gate.calls.length === 1);
    writer.update(snapshot(2));
    let closed = false;
    const closing = writer.close().then(() => closed = true);
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(closed, false);
    gate.calls[0]?.release();
    await closing;
    writer.update(snapshot(3));
    await writer.idle();
    assert.equal(gate.calls.length, 1, "a snapshot was written after close");
    assert.deepEqual(await names(`${root}/metrics`), []);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("MetricsWriter stop waits for the write in flight, writes the last snapshot saying stopped and leaves the file", async () => {
  const root = await makeRoot(["metrics"]);
  const gate = gatedWrite();
  try {
    const writer = new MetricsWriter(root, 8000, { write: gate.write });
    writer.update(snapshot(1));
    await until(() => gate.calls.length === 1);
    writer.update(snapshot(2));
    let stopped = false;
    const stopping = writer.stop({ ...snapshot(3), engines: [] }).then(() =>
      stopped = true
    );
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(stopped, false);
    gate.calls[0]?.release();
    await until(() => gate.calls.length === 2);
    gate.calls[1]?.release();
    await stopping;
    writer.update(snapshot(4));
    await writer.idle();
    assert.equal(
      gate.calls.length,
      2,
      "the stop's snapshot only, nothing after",
    );
    assert.deepEqual(await names(`${root}/metrics`), [
      "mymodel_serve_8000.prom",
    ]);
    const text = await Deno.readTextFile(writer.path);
    assert.match(text, /^mymodel_launcher_stopped\{port="8000"\} 1$/m);
    assert.doesNotMatch(text, /^mymodel_engine_/m, "no engine: all stopped");
    assert.match(text, /^# mymodel_serve owner pid=\d+ /, "its owner named");
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("MetricsWriter disposal removes the file", async () => {
  const root = await makeRoot(["metrics"]);
  try {
    {
      await using writer = new MetricsWriter(root, 8002);
      writer.update(snapshot(0));
      await writer.idle();
      assert.deepEqual(await names(`${root}/metrics`), [
        "mymodel_serve_8002.prom",
      ]);
    }
    assert.deepEqual(await names(`${root}/metrics`), []);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
