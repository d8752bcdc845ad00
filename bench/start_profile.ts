/**
 * Where the launcher's start-up time goes with many engines: each step the
 * launcher takes per engine, repeated 32 times in this process and timed
 * alone. Usage: `deno run -A bench/start_profile.ts [count]`.
 *
 * The spawn rows use `sleep` as the child, so they time the launcher's own
 * cost (fork, exec, the `detached` session), not the engines' start-up; the
 * last rows spawn the stand-in Deno engine to show how much 32 engines
 * starting at once slow the launcher down on a small machine.
 *
 * @module
 */

import process from "node:process";
import { Registry } from "../src/catalogue.ts";
import { fakeBin, makeRoot, pathWith } from "../tests/support/helpers.ts";

const COUNT = Number(Deno.args[0] ?? 32);

interface Row {
  step: string;
  totalMs: number;
  cpuMs: number;
}

const rows: Row[] = [];

/** Runs `step` COUNT times; records wall time and this process's CPU time. */
async function time(
  step: string,
  body: (i: number) => unknown | Promise<unknown>,
): Promise<void> {
  const cpu = process.cpuUsage();
  const start = performance.now();
  for (let i = 0; i < COUNT; i++) await body(i);
  const totalMs = performance.now() - start;
  const used = process.cpuUsage(cpu);
  rows.push({ step, totalMs, cpuMs: (used.user + used.system) / 1000 });
}

function statPath(name: string): boolean {
  for (const dir of (Deno.env.get("PATH") ?? "").split(":")) {
    try {
      const info = Deno.statSync(`${dir}/${name}`);
      if (info.isFile && ((info.mode ?? 0) & 0o111) !== 0) return true;
    } catch {
      // Not in this directory.
    }
  }
  return false;
}

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr;
  listener.close();
  return port;
}

async function spawnMany(
  step: string,
  command: string,
  args: string[],
  options: Partial<Deno.CommandOptions>,
): Promise<void> {
  const children: Deno.ChildProcess[] = [];
  await time(step, () => {
    children.push(
      new Deno.Command(command, {
        args,
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
        ...options,
      }).spawn(),
    );
  });
  for (const child of children) {
    try {
      child.kill("SIGKILL");
    } catch {
      // Already gone.
    }
    await child.stdout.cancel();
    await child.stderr.cancel();
    await child.status;
  }
}

const root = await makeRoot();
const bin = await fakeBin(["vllm"]);
Deno.env.set("PATH", pathWith(bin));
try {
  const lines = ["models:"];
  for (let i = 0; i < COUNT; i++) {
    lines.push(`  e${i}: { verb: chat, hub: org/e${i} }`);
  }
  await Deno.writeTextFile(`${root}/catalogue.yaml`, lines.join("\n") + "\n");

  await time(
    "catalogue: Registry.load (generated, once per row)",
    () => Registry.load(`${root}/catalogue.yaml`),
  );
  await time(
    "catalogue: Registry.load (shipped, once per row)",
    () => Registry.load(),
  );
  await time(
    "executable lookup: stat every PATH entry",
    () => statPath("vllm"),
  );
  await time("log: header write + 2 opens (sync)", (i) => {
    const file = `${root}/logs/e${i}.log`;
    Deno.writeTextFileSync(file, "--- start\n", { append: true });
    Deno.openSync(file, { append: true }).close();
    Deno.openSync(file, { append: true }).close();
  });
  const ports = Array.from({ length: COUNT }, freePort);
  await time(
    "checkPortFree: listen + close",
    (i) => Deno.listen({ hostname: "127.0.0.1", port: ports[i]! }).close(),
  );
  await time("environment: Deno.env.toObject()", () => Deno.env.toObject());
  await spawnMany("spawn sleep, detached: false", "sleep", ["30"], {});
  await spawnMany("spawn sleep, detached: true", "sleep", ["30"], {
    detached: true,
  });
  await spawnMany(
    "spawn sleep, detached + clearEnv + env",
    "sleep",
    ["30"],
    { detached: true, clearEnv: true, env: Deno.env.toObject() },
  );
  await spawnMany(
    "spawn stand-in Deno engine (they start meanwhile)",
    `${bin}/vllm`,
    ["--host", "127.0.0.1", "--port", "0"],
    { detached: true },
  );
} finally {
  await Deno.remove(root, { recursive: true });
  await Deno.remove(bin, { recursive: true });
}

console.log(`| step (×${COUNT}) | wall ms | per engine ms | launcher CPU ms |`);
console.log("|---|--:|--:|--:|");
for (const { step, totalMs, cpuMs } of rows) {
  console.log(
    `| ${step} | ${totalMs.toFixed(1)} | ${(totalMs / COUNT).toFixed(2)} | ${
      cpuMs.toFixed(1)
    } |`,
  );
}
