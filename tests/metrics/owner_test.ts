/**
 * Metrics files of dead launchers: the first write of a launcher removes the
 * files whose owner is gone (or whose pid was reused) and leaves those of live
 * launchers, of itself, and files naming no owner.
 */
import assert from "node:assert/strict";
import { configureLogging, type LogLevel } from "../../src/common/log.ts";
import { MetricsWriter } from "../../src/metrics/file.ts";
import { ownerComment, ownerOf } from "../../src/metrics/file.ts";
import type { MetricsSnapshot } from "../../src/metrics/text.ts";
import { procStats } from "../../src/engines/proc.ts";
import { listDir, makeRoot } from "../support/helpers.ts";
import { get, parse } from "../support/prometheus.ts";

const logged: [LogLevel, string][] = [];
configureLogging({
  level: "debug",
  sink: (level, message) => logged.push([level, message]),
});

const SNAPSHOT: MetricsSnapshot = {
  launcher: {
    version: "0.1.0",
    mode: "development",
    tls: false,
    port: 8000,
    startTimeSeconds: 1_700_000_000,
  },
  engines: [],
};

/** A file as a launcher with this owner line would have left it. */
function leftBy(pid: number, startTime: string): string {
  return ownerComment({ pid, startTime }) +
    '# TYPE mymodel_engine_up gauge\nmymodel_engine_up{model="m"} 1\n';
}

/** The pid of a process that has exited (and been waited for). */
async function deadPid(): Promise<number> {
  const child = new Deno.Command("true").spawn();
  await child.status;
  return child.pid;
}

/**
 * In `dir`, the file of launcher 9001, which is dead, and that of 9003, alive: any live process
 * with its real start time, killed when the result is disposed.
 */
async function deadAndLive(dir: string) {
  const live = new Deno.Command("sleep", { args: ["30"] }).spawn();
  const gone = async () => {
    live.kill("SIGKILL");
    await live.status;
  };
  try {
    const dead = await deadPid();
    const liveStart = procStats([live.pid]).get(live.pid)!.startTime;
    await Deno.writeTextFile(
      `${dir}/mymodel_serve_9001.prom`,
      leftBy(dead, "1"),
    );
    await Deno.writeTextFile(
      `${dir}/mymodel_serve_9003.prom`,
      leftBy(live.pid, liveStart),
    );
    return { dead, [Symbol.asyncDispose]: gone };
  } catch (e) {
    await gone();
    throw e;
  }
}

Deno.test("a launcher's first metrics write removes the files of dead launchers and keeps those of live ones", async () => {
  const root = await makeRoot(["metrics"]);
  try {
    const dir = `${root}/metrics`;
    await using launchers = await deadAndLive(dir);
    const { dead } = launchers;
    // This very pid, but another start time: a reused pid, its launcher gone.
    await Deno.writeTextFile(
      `${dir}/mymodel_serve_9002.prom`,
      leftBy(Deno.pid, "1"),
    );
    await Deno.writeTextFile(`${dir}/mymodel_serve_9004.prom`, "a 1\n");
    await Deno.writeTextFile(`${dir}/other.prom`, leftBy(dead, "1"));
    logged.length = 0;
    {
      await using writer = new MetricsWriter(root, 8000);
      writer.update(SNAPSHOT);
      await writer.idle();
      assert.deepEqual(listDir(dir), [
        "mymodel_serve_8000.prom",
        "mymodel_serve_9003.prom",
        "mymodel_serve_9004.prom",
        "other.prom",
      ]);
    }
    assert.deepEqual(
      logged.filter(([, m]) => m.startsWith("removed metrics file")),
      [
        [
          "info",
          `removed metrics file ${dir}/mymodel_serve_9001.prom: its launcher (pid ${dead}) is gone`,
        ],
        [
          "info",
          `removed metrics file ${dir}/mymodel_serve_9002.prom: its launcher (pid ${Deno.pid}) is gone`,
        ],
      ],
    );
    assert.deepEqual(listDir(dir), [
      "mymodel_serve_9003.prom",
      "mymodel_serve_9004.prom",
      "other.prom",
    ]);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("two writers of one process on one directory keep each other's files", async () => {
  const root = await makeRoot(["metrics"]);
  try {
    await using a = new MetricsWriter(root, 8000);
    a.update(SNAPSHOT);
    await a.idle();
    await using b = new MetricsWriter(root, 8001);
    b.update({ ...SNAPSHOT, launcher: { ...SNAPSHOT.launcher, port: 8001 } });
    await b.idle();
    assert.deepEqual(listDir(`${root}/metrics`), [
      "mymodel_serve_8000.prom",
      "mymodel_serve_8001.prom",
    ]);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("a writer that cannot tell its own start time removes nothing and names no owner", async () => {
  const root = await makeRoot(["metrics"]);
  try {
    const stale = `${root}/metrics/mymodel_serve_9001.prom`;
    await Deno.writeTextFile(stale, leftBy(await deadPid(), "1"));
    await using writer = new MetricsWriter(root, 8000, { owner: undefined });
    writer.update(SNAPSHOT);
    await writer.idle();
    assert.ok(listDir(`${root}/metrics`).includes("mymodel_serve_9001.prom"));
    assert.equal(ownerOf(await Deno.readTextFile(writer.path)), undefined);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("every metrics write carries its owner and a last-update gauge an alert can age", async () => {
  const root = await makeRoot(["metrics"]);
  try {
    await using writer = new MetricsWriter(root, 8000);
    const before = Date.now() / 1000;
    writer.update(SNAPSHOT);
    await writer.idle();
    const text = await Deno.readTextFile(writer.path);
    assert.deepEqual(ownerOf(text), {
      pid: Deno.pid,
      startTime: procStats([Deno.pid]).get(Deno.pid)?.startTime,
    });
    const family = get(
      parse(text),
      "mymodel_metrics_updated_timestamp_seconds",
    );
    assert.equal(family.type, "GAUGE");
    assert.equal(family.metrics.length, 1);
    assert.deepEqual(family.metrics[0]?.labels, { port: "8000" });
    const first = Number(family.metrics[0]?.value);
    assert.ok(first >= before && first <= Date.now() / 1000, `${first}`);
    assert.doesNotMatch(text, /\} \S+ \d+\n/, "no sample timestamps");
    await new Promise((resolve) => setTimeout(resolve, 20));
    writer.update(SNAPSHOT);
    await writer.idle();
    const again = get(
      parse(await Deno.readTextFile(writer.path)),
      "mymodel_metrics_updated_timestamp_seconds",
    );
    assert.ok(
      Number(again.metrics[0]?.value) > first,
      "a later write, a later time",
    );
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("the sweep reads only a file's first line, bounded: a 400 MB file costs no memory", async () => {
  const root = await makeRoot(["metrics"]);
  try {
    const dir = `${root}/metrics`;
    const size = 400 * 1024 * 1024;
    // Sparse (Deno.truncate): no disk taken. A dead owner's line, then zeros.
    const dead = `${dir}/mymodel_serve_9001.prom`;
    await Deno.writeTextFile(dead, leftBy(await deadPid(), "1"));
    await Deno.truncate(dead, size);
    // One line of 400 MB: no owner within the bound, so left alone.
    const long = `${dir}/mymodel_serve_9002.prom`;
    await Deno.writeTextFile(long, "# mymodel_serve owner pid=1 start_time=1");
    await Deno.truncate(long, size);
    const rss = Deno.memoryUsage().rss;
    {
      await using writer = new MetricsWriter(root, 8000);
      writer.update(SNAPSHOT);
      await writer.idle();
    }
    const grew = (Deno.memoryUsage().rss - rss) / 1024 / 1024;
    assert.deepEqual(listDir(dir), ["mymodel_serve_9002.prom"]);
    assert.ok(
      grew < 64,
      `the sweep grew the process by ${grew.toFixed(0)} MiB`,
    );
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("a dead launcher's temporary metrics file (killed between write and rename) goes with its file; a live one's and a planted link's target stay", async () => {
  const root = await makeRoot(["metrics"]);
  try {
    const dir = `${root}/metrics`;
    await using _launchers = await deadAndLive(dir);
    await Deno.writeTextFile(
      `${dir}/.mymodel_serve_9001.prom.0123456789abcdef.tmp`,
      "half",
    );
    await Deno.writeTextFile(
      `${dir}/.mymodel_serve_9003.prom.fedcba9876543210.tmp`,
      "in flight",
    );
    const target = `${root}/keep.txt`;
    await Deno.writeTextFile(target, "not the launcher's");
    await Deno.symlink(
      target,
      `${dir}/.mymodel_serve_9001.prom.aaaaaaaaaaaaaaaa.tmp`,
    );
    {
      await using writer = new MetricsWriter(root, 8000);
      writer.update(SNAPSHOT);
      await writer.idle();
    }
    assert.deepEqual(listDir(dir), [
      ".mymodel_serve_9001.prom.aaaaaaaaaaaaaaaa.tmp",
      ".mymodel_serve_9003.prom.fedcba9876543210.tmp",
      "mymodel_serve_9003.prom",
    ]);
    assert.equal(await Deno.readTextFile(target), "not the launcher's");
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
