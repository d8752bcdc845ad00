/**
 * The alert rules (deploy/prometheus/alerts.yml) in a real Prometheus, over the
 * real launcher's metrics file as node_exporter's textfile collector exposes
 * it, all on loopback: a clean stop (SIGTERM), then a move to another port
 * (the next launcher removes the stopped one's file), fire nothing; a SIGKILL
 * pages (`MymodelMetricsFileStale`), and so does the removal of the killed
 * launcher's file by a next launcher (`MymodelLauncherDown`).
 *
 * The rules' windows are minutes: Prometheus here evaluates a copy whose every
 * duration (`for:`, range selectors) and the metrics file's age threshold are
 * divided by {@linkcode SCALE} (`for: 2m` is 4 s, `> 120` is `> 4`). The
 * operator's figures themselves are proved by promtool's unit tests
 * (monitoring_test.ts). Without `prometheus` and node_exporter (Debian:
 * `apt-get install prometheus prometheus-node-exporter`) the test is skipped
 * with one line.
 */
import assert from "node:assert/strict";
import { stringify } from "yaml";
import {
  fakeBin,
  freePorts,
  Launcher,
  makeRoot,
  pathWith,
  siteArgs,
  waitFor,
} from "../support/helpers.ts";

const RULES = new URL("../../deploy/prometheus/alerts.yml", import.meta.url)
  .pathname;
/** Rules' durations and the file-age threshold are divided by this. */
export const SCALE = 30;
const TICK = "500ms";
/** The scaled rules' file-age threshold and `MymodelLauncherDown`'s `for:`, in seconds. */
const STALE_S = 120 / SCALE;
const DOWN_FOR_S = 120 / SCALE;
const LAUNCHER_ALERTS = ["MymodelMetricsFileStale", "MymodelLauncherDown"];

/** The first of `names` that runs here (`--version` exits 0), if any. */
async function found(names: string[]): Promise<string | undefined> {
  for (const name of names) {
    const allowed = await Deno.permissions.query({
      name: "run",
      command: name,
    });
    if (allowed.state !== "granted") continue;
    try {
      const { success } = await new Deno.Command(name, {
        args: ["--version"],
        stdout: "null",
        stderr: "null",
      }).output();
      if (success) return name;
    } catch {
      // not installed
    }
  }
  return undefined;
}

const PROMETHEUS = await found(["prometheus"]);
// Debian names node_exporter `prometheus-node-exporter`.
const NODE_EXPORTER = await found([
  "node_exporter",
  "prometheus-node-exporter",
]);
const missing = [
  PROMETHEUS ? [] : ["prometheus"],
  NODE_EXPORTER ? [] : ["node_exporter"],
].flat();
if (missing.length > 0) {
  console.log(
    `${
      missing.join(" and ")
    } not installed (Debian: apt-get install prometheus prometheus-node-exporter): the real-Prometheus alert test is skipped`,
  );
}

function seconds(amount: number, unit: string): number {
  return amount * { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400 }[unit]!;
}

function scaled(amount: number, unit: string): string {
  return `${Math.round(seconds(amount, unit) * 1000 / SCALE)}ms`;
}

/**
 * `rules` with every `for:` and range selector divided by {@linkcode SCALE},
 * and the file-age threshold too; throws if one of them is not there.
 */
export function scaleRules(rules: string): string {
  const counts = { for: 0, range: 0, age: 0 };
  const out = rules
    .replace(/^(\s+for: )(\d+)(ms|s|m|h|d)$/gm, (_, head, n, unit) => {
      counts.for++;
      return head + scaled(Number(n), unit);
    })
    .replace(/\[(\d+)(ms|s|m|h|d)\]/g, (_, n, unit) => {
      counts.range++;
      return `[${scaled(Number(n), unit)}]`;
    })
    .replace(
      /(time\(\) - mymodel_metrics_updated_timestamp_seconds > )(\d+)/g,
      (_, head, n) => {
        counts.age++;
        return head + String(Number(n) / SCALE);
      },
    );
  assert.ok(
    counts.for >= 2 && counts.range >= 2 && counts.age === 1,
    `scaled: ${JSON.stringify(counts)}`,
  );
  return out;
}

Deno.test("scaleRules divides for:, range selectors and the file's age threshold", () => {
  const text = scaleRules(`
      - alert: A
        expr: max_over_time(x[1h]) unless y
        for: 2m
      - alert: B
        expr: increase(z[10m]) > 0
        for: 15m
      - alert: C
        expr: time() - mymodel_metrics_updated_timestamp_seconds > 120
`);
  assert.match(text, /x\[120000ms\]/);
  assert.match(text, /for: 4000ms/);
  assert.match(text, /z\[20000ms\]/);
  assert.match(text, /for: 30000ms/);
  assert.match(text, /_seconds > 4$/m);
});

interface Alert {
  labels: Record<string, string>;
  state: "pending" | "firing";
  activeAt: string;
}

/** A child process, stopped with SIGTERM and awaited on dispose. */
function spawn(command: string, args: string[]): AsyncDisposable & {
  child: Deno.ChildProcess;
  said: () => string;
} {
  const child = new Deno.Command(command, {
    args,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const chunks: string[] = [];
  const done = Promise.all([child.stdout, child.stderr].map(async (s) => {
    for await (const text of s.pipeThrough(new TextDecoderStream())) {
      chunks.push(text);
    }
  }));
  return {
    child,
    said: () => chunks.join(""),
    async [Symbol.asyncDispose]() {
      try {
        child.kill("SIGTERM");
      } catch {
        // already gone
      }
      await Promise.all([child.status, done]);
    },
  };
}

Deno.test({
  name:
    "a real Prometheus on the rules: a clean stop and a move to another port fire nothing; a SIGKILL pages",
  ignore: missing.length > 0,
  async fn() {
    const root = await makeRoot();
    const work = await Deno.makeTempDir({ prefix: "serve-prometheus-" });
    const bin = await fakeBin();
    // Launchers A, B, C (a port and one for its engine each), node_exporter, Prometheus.
    const base = freePorts(7);
    const [portA, portB, portC] = [base, base + 2, base + 4];
    const [exporterPort, prometheusPort] = [base + 6, base + 7];
    const api = `http://127.0.0.1:${prometheusPort}/api/v1`;
    const launchers: Launcher[] = [];
    function start(port: number): Launcher {
      const launcher = new Launcher(
        ["alpha", ...siteArgs(port, root), "--health-interval", "0.2"],
        { PATH: pathWith(bin), NUCLEUS_MODE: "dev" },
      );
      launchers.push(launcher);
      return launcher;
    }
    /** Prometheus' answer to an instant query: each series' labels and value. */
    async function query(
      expr: string,
    ): Promise<{ metric: Record<string, string>; value: [number, string] }[]> {
      const response = await fetch(
        `${api}/query?query=${encodeURIComponent(expr)}`,
      );
      const body = await response.json();
      return body.data?.result ?? [];
    }
    async function alerts(): Promise<Alert[]> {
      const response = await fetch(`${api}/alerts`);
      return (await response.json()).data.alerts;
    }
    /** Every alert seen while `until` is false, polled every 200 ms. */
    async function watch(
      until: () => boolean | Promise<boolean>,
      what: string,
      ms: number,
    ): Promise<Alert[]> {
      const seen: Alert[] = [];
      await waitFor(
        async () => {
          seen.push(...await alerts());
          await new Promise((r) => setTimeout(r, 150));
          return await until();
        },
        what,
        ms,
      );
      return seen;
    }
    const sinceS = (t: number) =>
      Number(((performance.now() - t) / 1000).toFixed(1));
    /** Each alert once: `name{port=…} state`. */
    const names = (seen: Alert[]) => [
      ...new Set(
        seen.map((a) =>
          `${a.labels.alertname}{port=${a.labels.port ?? ""}} ${a.state}`
        ),
      ),
    ];
    try {
      await Deno.writeTextFile(
        `${work}/rules.yml`,
        scaleRules(await Deno.readTextFile(RULES)),
      );
      await Deno.writeTextFile(
        `${work}/prometheus.yml`,
        stringify({
          global: { scrape_interval: TICK, evaluation_interval: TICK },
          rule_files: [`${work}/rules.yml`],
          scrape_configs: [{
            job_name: "node",
            static_configs: [{ targets: [`127.0.0.1:${exporterPort}`] }],
          }],
        }),
      );
      await using exporter = spawn(NODE_EXPORTER!, [
        `--web.listen-address=127.0.0.1:${exporterPort}`,
        "--collector.disable-defaults",
        "--collector.textfile",
        `--collector.textfile.directory=${root}/metrics`,
      ]);
      await using prometheus = spawn(PROMETHEUS!, [
        `--config.file=${work}/prometheus.yml`,
        `--storage.tsdb.path=${work}/data`,
        `--web.listen-address=127.0.0.1:${prometheusPort}`,
        "--log.level=warn",
      ]);
      const a = start(portA);
      await a.ready();
      await waitFor(
        async () =>
          (await query(
              `mymodel_engine_up{model="alpha"} == 1 and on (instance) up == 1`,
            )).length === 1 &&
          (await query(`mymodel_launcher_stopped{port="${portA}"} == 0`))
              .length === 1,
        "Prometheus scraping launcher A's file through node_exporter",
        30_000,
      ).catch((error) => {
        throw new Error(
          `${error.message}\nprometheus: ${prometheus.said()}\nnode_exporter: ${exporter.said()}`,
        );
      });

      // 1. A clean stop: the file stays, saying so.
      assert.equal((await a.stop()).code, 0);
      const stoppedAt = performance.now();
      const afterStop = await watch(
        () => sinceS(stoppedAt) > 2 * STALE_S + 2,
        "the window after the clean stop",
        30_000,
      );
      assert.equal(
        (await query(`mymodel_launcher_stopped{port="${portA}"} == 1`)).length,
        1,
        "Prometheus saw the stop",
      );
      assert.deepEqual(names(afterStop), [], "nothing after a clean stop");

      // 2. A move to another port: B removes A's file at its first write.
      const b = start(portB);
      await b.ready();
      await waitFor(
        async () =>
          (await query(`mymodel_launcher_info{port="${portA}"}`)).length ===
            0 &&
          (await query(`mymodel_launcher_stopped{port="${portB}"} == 0`))
              .length === 1,
        "A's file gone from Prometheus, B's there",
        30_000,
      );
      const goneAt = performance.now();
      const afterMove = await watch(
        () => sinceS(goneAt) > DOWN_FOR_S + 4,
        "the window after the move",
        30_000,
      );
      assert.deepEqual(
        names(afterMove.filter((x) =>
          x.state === "firing" ||
          LAUNCHER_ALERTS.includes(x.labels.alertname!)
        )),
        [],
        "nothing after the move (an engine starting may be pending, never firing)",
      );

      // 3. SIGKILL: B's file stays as it was, aging.
      await waitFor(
        async () => (await alerts()).length === 0,
        "no alert pending before the kill",
        30_000,
      );
      b.child.kill("SIGKILL");
      await b.exited();
      const killedAt = performance.now();
      let stale: Alert | undefined;
      await watch(
        async () => {
          stale = (await alerts()).find((x) =>
            x.labels.alertname === "MymodelMetricsFileStale" &&
            x.labels.port === String(portB) && x.state === "firing"
          );
          return stale !== undefined;
        },
        "MymodelMetricsFileStale for B after its SIGKILL",
        30_000,
      );
      const staleAfter = sinceS(killedAt);
      assert.equal(stale?.labels.severity, "critical");

      // 4. The next launcher removes the killed one's file: the page goes on.
      const c = start(portC);
      await c.ready();
      await waitFor(
        async () =>
          (await query(`mymodel_launcher_info{port="${portB}"}`)).length === 0,
        "B's file gone from Prometheus",
        30_000,
      );
      const removedAt = performance.now();
      let down: Alert | undefined;
      await watch(
        async () => {
          down = (await alerts()).find((x) =>
            x.labels.alertname === "MymodelLauncherDown" &&
            x.labels.port === String(portB) && x.state === "firing"
          );
          return down !== undefined;
        },
        "MymodelLauncherDown for B after its file went",
        30_000,
      );
      const downAfter = sinceS(removedAt);
      assert.equal(down?.labels.severity, "critical");
      console.log(
        `real Prometheus (rules scaled 1/${SCALE}, scrape and evaluation every ${TICK}): ` +
          `nothing in ${
            sinceS(stoppedAt)
          } s after a clean stop (move to another port included); ` +
          `MymodelMetricsFileStale firing ${staleAfter} s after SIGKILL (threshold ${STALE_S} s); ` +
          `MymodelLauncherDown firing ${downAfter} s after the killed launcher's file went (for: ${DOWN_FOR_S} s)`,
      );
    } finally {
      for (const launcher of launchers) await launcher.stop();
      for (const dir of [root, work, bin]) {
        await Deno.remove(dir, { recursive: true }).catch(() => {});
      }
    }
  },
});
