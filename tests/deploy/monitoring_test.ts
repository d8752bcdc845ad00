/**
 * The alert rules (deploy/prometheus/alerts.yml) and the Grafana dashboard
 * (deploy/grafana/mymodel-serve.json) against a metrics file the real
 * launcher wrote: every metric and label they use is one it writes, the
 * rules pass promtool's checks and unit tests (input series from that file),
 * every dashboard query parses.
 */
import assert from "node:assert/strict";
import { parse as parseYaml, stringify } from "yaml";
import { SEMIOSERVE_DEFAULTS } from "../../src/serve/config.ts";
import { launch, makeRoot, waitFor } from "../support/helpers.ts";
import {
  fakeDevices,
  fakeGpuMachine,
  nvidiaSmiScript,
} from "../support/fake_gpus.ts";
import { parse } from "../support/prometheus.ts";
import { hasPromtool, promtool } from "../support/promtool.ts";
import { metricNames, selectors } from "../support/promql.ts";
import { type AlertRule, ruleTests } from "./alert_cases.ts";

// deno-lint-ignore no-explicit-any
type Json = any;

const RULES = new URL("../../deploy/prometheus/alerts.yml", import.meta.url)
  .pathname;
const DASHBOARD = new URL(
  "../../deploy/grafana/mymodel-serve.json",
  import.meta.url,
).pathname;
/** Series node_exporter itself provides; every other name must be the launcher's. */
const NODE_EXPORTER = new Set([
  "up",
  "node_textfile_mtime_seconds",
  "node_textfile_scrape_error",
]);

const rules: AlertRule[] = parseYaml(Deno.readTextFileSync(RULES)).groups
  .flatMap((g: { rules: AlertRule[] }) => g.rules);
const dashboard: Json = JSON.parse(Deno.readTextFileSync(DASHBOARD));
const targets: { panel: string; expr: string }[] = dashboard.panels.flatMap((
  p: Json,
) => p.targets.map((t: Json) => ({ panel: p.title, expr: t.expr })));
const variables: Json[] = dashboard.templating.list;
/** `label_values(<selector>, <label>)` of the query variables. */
const variableQueries = variables.filter((v) => v.type === "query").map((
  v,
) => {
  const m = /^label_values\((.*),\s*(\w+)\)$/.exec(v.query.query);
  assert.ok(m, `variable ${v.name}: ${v.query.query}`);
  return { name: v.name, expr: m[1]!, label: m[2]! };
});
const expressions = [
  ...rules.map((r) => r.expr),
  ...targets.map((t) => t.expr),
  ...variableQueries.map((q) => q.expr),
];

/** Grafana's variables replaced, as it does before it asks Prometheus. */
function asPromQL(expr: string): string {
  return expr.replace(/\$__(rate_interval|interval|range)\b/g, "5m")
    .replace(/\$\{?\w+\}?/g, "x");
}

/** The metric names `exprs` use that neither the file nor node_exporter has. */
function unknownNames(fileText: string, exprs: readonly string[]): string[] {
  const written = parse(fileText);
  const used = new Set(exprs.flatMap((e) => [...metricNames(e)]));
  return [...used].filter((n) => !written.has(n) && !NODE_EXPORTER.has(n))
    .sort();
}

/** `name{label}` pairs of `exprs` whose label no sample of that family in the file has. */
function unknownLabels(fileText: string, exprs: readonly string[]): string[] {
  const written = parse(fileText);
  const out = new Set<string>();
  for (const { name, labels } of exprs.flatMap(selectors)) {
    const family = written.get(name);
    if (!family) continue; // node_exporter's, or unknownNames says it
    const have = new Set(
      family.metrics.flatMap((m) => Object.keys(m.labels ?? {})),
    );
    for (const label of labels) {
      if (!have.has(label) && label !== "instance" && label !== "job") {
        out.add(`${name}{${label}}`);
      }
    }
  }
  return [...out].sort();
}

function renamed(text: string, name: string, to: string): string {
  return text.replace(new RegExp(`\\b${name}\\b`, "g"), to);
}

/**
 * A metrics file the launcher wrote over stand-in engines on a fake GPU
 * machine: `ready` serving on GPU 0 (traffic, tokens, GPU memory), `typo`
 * failed (two exits with vLLM's own bad-arguments lines) on GPU 1, `fetching`
 * (no GPU) starting, downloading its weights (vLLM's `Fetching 4 files` line).
 */
async function writtenFile(): Promise<string> {
  await using gpus = await fakeGpuMachine({ devices: fakeDevices(2) });
  const root = await makeRoot();
  const catalogue = `${root}/cards.yaml`;
  await Deno.writeTextFile(
    catalogue,
    `models:
  ready: { verb: chat, hub: org/ready, gpus: 1, args: { fake-metrics: vllm, fake-gpu-mib: 1000 } }
  typo:
    verb: chat
    hub: org/typo
    gpus: 1
    args: { fake-lines: vllm-args, fake-crash-after-ms: 50, fake-exit-code: 2, fake-listen-after-ms: 5000 }
  fetching:
    verb: chat
    hub: org/fetching
    gpus: 0
    args: { fake-print: "Fetching 4 files:   0%|          | 0/4 [00:00<?, ?it/s]", fake-listen-after-ms: 600000 }
`,
  );
  await using s = await launch(["ready", "typo", "fetching"], {
    root,
    catalogue,
    args: ["--health-interval", "0.2", "--gpus", "0-1"],
    bin: { "nvidia-smi": nvidiaSmiScript() },
    env: { FAKE_GPU_LEDGER: gpus.ledger },
  });
  await s.launcher.ready();
  const path = `${root}/metrics/mymodel_serve_${s.port}.prom`;
  let text = "";
  await waitFor(
    async () => {
      text = await Deno.readTextFile(path).catch(() => "");
      const f = parse(text);
      const has = (
        name: string,
        labels: Record<string, string>,
        value?: string,
      ) =>
        f.get(name)?.metrics.some((m) =>
          Object.entries(labels).every(([k, v]) => m.labels?.[k] === v) &&
          (value === undefined || m.value === value)
        ) ?? false;
      return has(
        "mymodel_engine_state",
        { model: "typo", state: "failed" },
        "1",
      ) &&
        has("mymodel_engine_gpu_memory_bytes", { model: "ready" }) &&
        has(
          "mymodel_engine_load_phase",
          { model: "fetching", phase: "downloading" },
          "1",
        ) &&
        has("mymodel_engine_requests_running", { model: "ready" });
    },
    "ready serving on its GPU and typo failed in the metrics file",
    30_000,
  );
  return text;
}

Deno.test("metricNames reads the names an expression selects, not its functions, labels, keywords or variables", () => {
  assert.deepEqual(
    [...metricNames(
      'sum by (instance, model) (rate(a_total{model=~"$engine", x="b{c}"}[$__rate_interval])) > 0\n' +
        "unless on (model) b == 1 and ignoring (state) c:d offset 5m or vector(1e3)",
    )].sort(),
    ["a_total", "b", "c:d"],
  );
  assert.deepEqual(selectors('x{a="1", b!~"2,3"} / {c="d"}'), [
    { name: "x", labels: ["a", "b"] },
    { name: "", labels: ["c"] },
  ]);
  assert.throws(() => metricNames('{__name__="x"}'), /__name__/);
});

Deno.test("each alert has a summary and a description naming the engine or the launcher and where to look first", () => {
  assert.ok(rules.length >= 8);
  for (const rule of rules) {
    const { summary, description } = rule.annotations ?? {};
    assert.ok(summary && description, rule.alert);
    const about = rule.expr.includes("mymodel_engine_")
      ? "{{ $labels.model }}"
      : "{{ $labels.port }}";
    assert.ok(description.includes(about), `${rule.alert} names ${about}`);
    assert.match(description, /status view|journal|log/, rule.alert);
    assert.match(rule.labels?.severity ?? "", /^(warning|critical)$/);
  }
});

Deno.test("the alert thresholds follow the launcher's defaults", () => {
  const d = SEMIOSERVE_DEFAULTS;
  const rule = (name: string) => rules.find((r) => r.alert === name)!;
  const minutes = (ms: number) => `${ms / 60_000}m`;
  assert.equal(rule("MymodelEngineNotReady").for, minutes(d.startTimeoutMs));
  assert.match(
    rule("MymodelEngineFailed").expr,
    new RegExp(`\\[${minutes(d.failedRetryMs)}\\]`),
  );
  assert.match(
    rule("MymodelEngineRestartStorm").expr,
    new RegExp(`\\[${minutes(d.stableAfterMs)}\\]`),
  );
  assert.match(
    rule("MymodelGpuMemoryNotReleased").expr,
    new RegExp(`>= ${d.gpuReleaseTimeoutMs / 1000}$`),
  );
  assert.match(
    rule("MymodelMetricsFileStale").expr,
    new RegExp(`> ${12 * d.healthIntervalMs / 1000}$`, "m"),
  );
});

Deno.test("the dashboard takes its data source as a variable and filters every query by launcher and engine", () => {
  const [source, launcher, engine] = variables;
  assert.deepEqual(
    [source.name, source.type, source.query],
    ["datasource", "datasource", "prometheus"],
  );
  assert.equal(launcher.name, "launcher");
  assert.equal(engine.name, "engine");
  // Every data source reference, panels' and targets' and variables', is the variable.
  const refs: Json[] = [];
  (function walk(node: Json) {
    if (node && typeof node === "object") {
      if (node.datasource) refs.push(node.datasource);
      Object.values(node).forEach(walk);
    }
  })(dashboard);
  assert.ok(refs.length > targets.length);
  for (const ref of refs) {
    assert.deepEqual(ref, { type: "prometheus", uid: "${datasource}" });
  }
  for (const { panel, expr } of targets) {
    assert.match(expr, /instance=~"\$launcher"/, panel);
    if (expr.includes("mymodel_engine_")) {
      assert.match(expr, /model=~"\$engine"/, panel);
    }
  }
  const titles = dashboard.panels.map((p: Json) => p.title);
  for (
    const title of [
      "Engine state",
      "Requests running and waiting",
      "Tokens/s",
      "Restarts",
      "Exits by cause",
      "GPU memory per engine and device",
      "Drains and requests cut",
    ]
  ) assert.ok(titles.includes(title), title);
});

Deno.test("the rules and the dashboard against a metrics file the launcher wrote", async (t) => {
  const text = await writtenFile();
  const dir = await Deno.makeTempDir({ prefix: "serve-promtool-" });
  try {
    await t.step(
      "every metric name they use is one the launcher writes",
      () => {
        assert.deepEqual(unknownNames(text, expressions), []);
      },
    );

    await t.step(
      "a metric renamed in the launcher's file fails the name check",
      () => {
        const used = new Set(expressions.flatMap((e) => [...metricNames(e)]));
        const launchers = [...used].filter((n) => !NODE_EXPORTER.has(n));
        assert.ok(launchers.length >= 10, launchers.join(" "));
        for (const name of launchers) {
          const changed = renamed(text, name, `${name}_renamed`);
          assert.deepEqual(unknownNames(changed, expressions), [name]);
        }
      },
    );

    await t.step(
      "every label they match on is on that metric in the file; a renamed one fails",
      () => {
        assert.deepEqual(unknownLabels(text, expressions), []);
        assert.deepEqual(
          unknownLabels(renamed(text, "cause", "why"), expressions),
          ["mymodel_engine_exits_total{cause}"],
        );
      },
    );

    await t.step(
      "the state timeline maps every state the launcher writes",
      () => {
        const states = new Set(
          parse(text).get("mymodel_engine_state")!.metrics.map((m) =>
            m.labels!.state!
          ),
        );
        const panel = dashboard.panels.find((p: Json) =>
          p.title === "Engine state"
        );
        const expr: string = panel.targets[0].expr;
        const mapped = panel.fieldConfig.defaults.mappings[0].options;
        assert.ok(states.has("failed") && states.has("draining"));
        for (const state of states) {
          const code = new RegExp(`state="${state}"\\} \\* (\\d+)`).exec(expr)
            ?.[1];
          assert.ok(code, `the query codes ${state}`);
          assert.equal(mapped[code].text, state);
        }
      },
    );

    await t.step(
      "the rule tests' input needs the file's metric and label names",
      () => {
        assert.throws(
          () =>
            ruleTests(
              renamed(text, "mymodel_engine_state", "mymodel_engine_status"),
              RULES,
              rules,
            ),
          /Cannot find mymodel_engine_state\{"model":"typo"/,
        );
        assert.throws(
          () => ruleTests(renamed(text, "reason", "why"), RULES, rules),
          /Cannot find mymodel_engine_start_wait_seconds_total/,
        );
      },
    );

    await t.step({
      name: "promtool check rules passes the alert rules",
      ignore: !hasPromtool,
      async fn() {
        const { success, said } = await promtool(["check", "rules", RULES]);
        assert.ok(success, said);
        assert.match(said, new RegExp(`SUCCESS: ${rules.length} rules found`));
      },
    });

    await t.step({
      name:
        "promtool test rules: each alert fires on its case and stays quiet on the other",
      ignore: !hasPromtool,
      async fn() {
        await Deno.writeTextFile(
          `${dir}/tests.yml`,
          ruleTests(text, RULES, rules),
        );
        const { success, said } = await promtool([
          "test",
          "rules",
          `${dir}/tests.yml`,
        ]);
        assert.ok(success, said);
        assert.match(said, /SUCCESS/);
        // Not vacuous: the same tests fail on rules reading a renamed metric.
        const broken = `${dir}/broken.yml`;
        await Deno.writeTextFile(
          broken,
          renamed(
            Deno.readTextFileSync(RULES),
            "mymodel_engine_restarts_total",
            "mymodel_engine_restarts",
          ),
        );
        await Deno.writeTextFile(
          `${dir}/broken_tests.yml`,
          ruleTests(text, broken, rules),
        );
        const after = await promtool([
          "test",
          "rules",
          `${dir}/broken_tests.yml`,
        ]);
        assert.equal(after.success, false);
        assert.match(after.said, /alertname: MymodelEngineRestartStorm/);
      },
    });

    await t.step({
      name:
        "every dashboard query parses (promtool check rules, as recording rules)",
      ignore: !hasPromtool,
      async fn() {
        const exprs = [
          ...targets.map((t) => t.expr),
          ...variableQueries.map((q) => q.expr),
        ];
        await Deno.writeTextFile(
          `${dir}/dashboard.yml`,
          stringify({
            groups: [{
              name: "dashboard",
              rules: exprs.map((expr, i) => ({
                record: `dashboard:query_${i}`,
                expr: asPromQL(expr),
              })),
            }],
          }),
        );
        const { success, said } = await promtool([
          "check",
          "rules",
          `${dir}/dashboard.yml`,
        ]);
        assert.ok(success, said);
        assert.match(said, new RegExp(`SUCCESS: ${exprs.length} rules found`));
        // Not vacuous: a query that does not parse fails.
        await Deno.writeTextFile(
          `${dir}/bad.yml`,
          stringify({
            groups: [{
              name: "d",
              rules: [{ record: "d:x", expr: "sum by (model (x)" }],
            }],
          }),
        );
        assert.equal(
          (await promtool(["check", "rules", `${dir}/bad.yml`])).success,
          false,
        );
      },
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
