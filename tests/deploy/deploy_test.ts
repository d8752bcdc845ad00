/**
 * The deployment files say what docs/deploy.md promises: the same narrowed
 * permissions everywhere, a stop sequence longer than the launcher's grace,
 * secrets as files, GPUs reachable, and Kubernetes manifests that pass the
 * API schemas (deploy/check.sh runs systemd-analyze on top).
 */
import assert from "node:assert/strict";
import { parse, parseAllDocuments } from "yaml";
import { ALLOW_RUN, V8_FLAGS } from "../../tools/compile.ts";
import { validateFile } from "../../deploy/validate_kubernetes.ts";

// Manifests are free-form JSON here; the schema test checks their shape.
// deno-lint-ignore no-explicit-any
type Json = any;

const DEPLOY = new URL("../../deploy/", import.meta.url);
const read = (path: string) => Deno.readTextFileSync(new URL(path, DEPLOY));

/** The unit's `[Service]` settings: every value of each key, continuation lines joined. */
function unitSettings(text: string): Map<string, string[]> {
  const settings = new Map<string, string[]>();
  const joined = text.replace(/\\\n\s*/g, " ");
  let section = "";
  for (const raw of joined.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const header = /^\[(\w+)\]$/.exec(line);
    if (header) {
      section = header[1]!;
      continue;
    }
    const eq = line.indexOf("=");
    const key = `${section}.${line.slice(0, eq)}`;
    settings.set(key, [...(settings.get(key) ?? []), line.slice(eq + 1)]);
  }
  return settings;
}

const unit = unitSettings(read("systemd/mymodel-serve.service"));
const one = (key: string) => unit.get(`Service.${key}`)?.at(-1);
const execStart = one("ExecStart") ?? "";
const flag = (args: string, name: string) =>
  new RegExp(`(?:^|\\s)${name}[= ](\\S+)`).exec(args)?.[1];

Deno.test("deno task start, the unit, the container and the binary run with the same programs allowed", async () => {
  const tasks = JSON.parse(
    await Deno.readTextFile(new URL("../../deno.json", import.meta.url)),
  ).tasks;
  const container = read("container/Containerfile");
  assert.equal(flag(tasks.start, "--allow-run"), ALLOW_RUN);
  assert.equal(flag(execStart, "--allow-run"), ALLOW_RUN);
  assert.ok(container.includes(`"--allow-run=${ALLOW_RUN}"`));
  // The same V8 heap setting wherever the launcher runs.
  assert.equal(flag(tasks.start, "--v8-flags"), V8_FLAGS);
  assert.equal(flag(execStart, "--v8-flags"), V8_FLAGS);
  assert.ok(container.includes(`"--v8-flags=${V8_FLAGS}"`));
  for (const text of [tasks.start, execStart, container]) {
    assert.ok(!/(?:^|[\s"])(-A|--allow-all)(?:[\s"]|$)/.test(text), text);
  }
});

Deno.test("systemd stops the launcher first, waits longer than its grace, and restarts on failure", () => {
  assert.equal(one("KillMode"), "mixed");
  assert.equal(one("Restart"), "on-failure");
  const grace = Number(flag(execStart, "--grace"));
  assert.ok(grace > 0);
  assert.ok(Number(one("TimeoutStopSec")) > grace);
});

Deno.test("systemd and Kubernetes leave room for the drain and the grace", () => {
  const drain = Number(flag(execStart, "--drain-timeout"));
  const grace = Number(flag(execStart, "--grace"));
  assert.ok(drain > 0, "the unit names --drain-timeout");
  assert.ok(Number(one("TimeoutStopSec")) > drain + grace);
  const set = parse(read("kubernetes/statefulset.yaml")) as Json;
  const pod = set.spec.template.spec;
  const value = (name: string) =>
    Number(
      pod.containers[0].args.find((a: string) => a.startsWith(`--${name}=`))
        ?.split("=")[1],
    );
  assert.ok(
    value("drain-timeout") > 0,
    "the StatefulSet names --drain-timeout",
  );
  assert.ok(
    pod.terminationGracePeriodSeconds >
      value("drain-timeout") + value("grace"),
  );
});

Deno.test("systemctl reload sends the launcher SIGHUP", () => {
  assert.equal(one("ExecReload"), "/bin/kill -HUP $MAINPID");
});

Deno.test("systemd hands the secrets over as credentials, read through the _FILE variables", () => {
  const credentials = unit.get("Service.LoadCredential") ?? [];
  const env = unit.get("Service.Environment") ?? [];
  assert.ok(credentials.some((c) => c.startsWith("idp-secret:")));
  assert.ok(env.includes("IDP_SECRET_FILE=%d/idp-secret"));
  assert.ok(env.includes("LOCAL_ENGINE_API_KEY_FILE=%d/engine-api-key"));
  assert.ok(!env.some((e) => /^IDP_SECRET=|^LOCAL_ENGINE_API_KEY=/.test(e)));
  // The launcher may read the credential directory, nothing else outside its
  // root and catalogue.
  assert.equal(
    flag(execStart, "--allow-read"),
    "/srv/mymodel,/opt/mymodel-serve/catalogue,%d",
  );
});

Deno.test("the systemd sandbox is strict but keeps the NVIDIA devices", () => {
  for (
    const [key, value] of [
      ["NoNewPrivileges", "yes"],
      ["ProtectSystem", "strict"],
      ["ReadWritePaths", "/srv/mymodel"],
      ["ProtectHome", "yes"],
      ["PrivateTmp", "yes"],
      ["DevicePolicy", "closed"],
    ]
  ) assert.equal(one(key!), value, key);
  assert.equal(one("PrivateDevices"), undefined, "would hide /dev/nvidia*");
  const devices = unit.get("Service.DeviceAllow") ?? [];
  assert.ok(devices.includes("char-nvidia-frontend rw"));
  assert.ok(devices.includes("char-nvidia-uvm rw"));
});

Deno.test("the Kubernetes manifests pass the Kubernetes API schemas", async () => {
  for (const file of ["statefulset.yaml", "services.yaml", "secret.yaml"]) {
    const path = decodeURIComponent(
      new URL(`kubernetes/${file}`, DEPLOY).pathname,
    );
    const { checked, problems } = await validateFile(path);
    assert.deepEqual(problems, [], file);
    assert.ok(checked > 0, file);
  }
});

Deno.test("the schema check rejects a manifest with a wrong type", async () => {
  const bad = await Deno.makeTempFile({ suffix: ".yaml" });
  try {
    await Deno.writeTextFile(
      bad,
      read("kubernetes/statefulset.yaml").replace(
        "replicas: 2",
        "replicas: two",
      ),
    );
    const { problems } = await validateFile(bad);
    assert.equal(problems.length, 1);
    assert.match(
      problems[0]!,
      /StatefulSet mymodel-serve: .*replicas must be integer/,
    );
  } finally {
    await Deno.remove(bad);
  }
});

Deno.test("the StatefulSet: one launcher per node, ordinal as NODE_RANK, probes, GPUs, secret file, grace", () => {
  const set = parse(read("kubernetes/statefulset.yaml")) as Json;
  const pod = set.spec.template.spec;
  const serve = pod.containers[0];
  const env = Object.fromEntries(
    serve.env.map((e: Json) => [e.name, e.value ?? e.valueFrom]),
  );
  assert.equal(set.spec.podManagementPolicy, "Parallel");
  assert.deepEqual(env.NODE_RANK, {
    fieldRef: { fieldPath: "metadata.labels['apps.kubernetes.io/pod-index']" },
  });
  assert.match(
    env.DIST_INIT_ADDR,
    /^mymodel-serve-0\.mymodel-serve-headless:\d+$/,
  );
  assert.equal(serve.resources.limits["nvidia.com/gpu"], 8);
  assert.deepEqual(serve.livenessProbe.tcpSocket, { port: "management" });
  assert.deepEqual(serve.readinessProbe.httpGet, {
    path: "/health",
    port: "engine",
  });
  const ports = Object.fromEntries(
    serve.ports.map((p: Json) => [p.name, p.containerPort]),
  );
  assert.equal(ports.management, 5000);
  assert.equal(ports.engine, 5001);
  const grace = Number(
    serve.args.find((a: string) => a.startsWith("--grace="))?.split("=")[1],
  );
  assert.ok(pod.terminationGracePeriodSeconds > grace);
  const secrets = serve.volumeMounts.find((m: Json) => m.name === "secrets");
  assert.ok(env.IDP_SECRET_FILE.startsWith(`${secrets.mountPath}/`));
  const root = serve.volumeMounts.find((m: Json) => m.name === "root");
  assert.equal(root.mountPath, env.MY_LOCAL);
  assert.equal(set.spec.volumeClaimTemplates[0].metadata.name, "root");
  assert.equal(pod.securityContext.runAsNonRoot, true);
});

Deno.test("the Services: per-pod management names, and the engine port on rank 0", () => {
  const services = parseAllDocuments(read("kubernetes/services.yaml")).map((
    d,
  ) => d.toJS() as Json);
  const byName = Object.fromEntries(services.map((s) => [s.metadata.name, s]));
  const headless = byName["mymodel-serve-headless"];
  assert.equal(headless.spec.clusterIP, "None");
  assert.equal(headless.spec.publishNotReadyAddresses, true);
  const engine = byName["mymodel-serve-engine"];
  assert.equal(
    engine.spec.selector["statefulset.kubernetes.io/pod-name"],
    "mymodel-serve-0",
  );
  assert.equal(engine.spec.ports[0].port, 5001);
  assert.equal(byName["mymodel-serve"].spec.ports[0].port, 5000);
});

Deno.test("the container runs the launcher as a non-root user on the vLLM image", () => {
  const text = read("container/Containerfile");
  assert.match(text, /^FROM vllm\/vllm-openai:/m);
  assert.match(text, /^COPY --from=deno \/deno \/usr\/local\/bin\/deno$/m);
  assert.match(text, /^USER 1000:1000$/m);
  assert.match(text, /^ENTRYPOINT \["deno", "run"/m);
  assert.match(text, /"\/opt\/mymodel-serve\/mod\.ts"\]/);
});
