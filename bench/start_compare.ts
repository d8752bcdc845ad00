/**
 * Start → "listening on" of the launcher with 1 and 32 engines that cost
 * nothing (`vllm` is `exec sleep 600`), against the Python reference
 * (bench/servers/python_reference.py: the same children in their own
 * sessions, piped, then a listening socket), in one run, order rotated each
 * round. By hand: `deno run -A bench/start_compare.ts [rounds]`.
 *
 * @module
 */
import { freePorts, makeRoot, pathWith } from "../tests/support/helpers.ts";

const ROUNDS = Number(Deno.args[0] ?? 5);
const MOD = new URL("../mod.ts", import.meta.url).pathname;
const PYTHON = new URL("servers/python_reference.py", import.meta.url).pathname;

const root = await makeRoot();
const bin = await Deno.makeTempDir({ prefix: "sleep-bin-" });
await Deno.writeTextFile(`${bin}/vllm`, "#!/bin/sh\nexec sleep 600\n", {
  mode: 0o755,
});
const names = Array.from({ length: 32 }, (_, i) => `e${i}`);
const catalogue = `${root}/catalogue.yaml`;
await Deno.writeTextFile(
  catalogue,
  "models:\n" +
    names.map((n) => `  ${n}: { verb: chat, hub: org/${n} }\n`).join(""),
);

/** Milliseconds from the spawn to its "listening on" line. */
async function listenMs(command: string, args: string[]): Promise<number> {
  const began = performance.now();
  const child = new Deno.Command(command, {
    args,
    env: { PATH: pathWith(bin), NO_COLOR: "1" },
    stdout: "null",
    stderr: "piped",
  }).spawn();
  let ms = NaN, text = "";
  for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
    text += chunk;
    if (!Number.isNaN(ms) || !text.includes("listening on ")) continue;
    ms = performance.now() - began;
    child.kill("SIGTERM");
  }
  await child.status;
  return ms;
}

const kinds: Record<string, (n: number) => Promise<number>> = {
  launcher: (n) =>
    listenMs(Deno.execPath(), [
      "run",
      "-A",
      "--quiet",
      MOD,
      ...names.slice(0, n),
      ...["--host", "127.0.0.1", "--port", String(freePorts(n))],
      ...["--directory", root, "--catalogue", catalogue, "--dev_mode"],
    ]),
  python: (n) =>
    listenMs("python3", [PYTHON, String(freePorts(0)), String(n), "vllm"]),
};
const rows = ["launcher 1", "launcher 32", "python 1", "python 32"];
const samples: Record<string, number[]> = Object.fromEntries(
  rows.map((r) => [r, []]),
);
for (let round = 0; round <= ROUNDS; round++) {
  const order = rows.map((_, i) => rows[(i + round) % rows.length]!);
  for (const row of order) {
    const [kind, n] = row.split(" ");
    const ms = await kinds[kind!]!(Number(n));
    await Deno.remove(`${root}/logs`, { recursive: true });
    await Deno.mkdir(`${root}/logs`);
    if (round > 0) samples[row]!.push(ms); // round 0 warms the caches
  }
}
await Deno.remove(root, { recursive: true });
await Deno.remove(bin, { recursive: true });
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
console.log(`| start → listening (median of ${ROUNDS}) | ms | samples |`);
console.log("|---|--:|---|");
for (const row of rows) {
  const xs = samples[row]!;
  console.log(
    `| ${row} | ${median(xs).toFixed(0)} | ${
      xs.map((x) => x.toFixed(0)).join(" ")
    } |`,
  );
}
const per = (kind: string) =>
  (median(samples[`${kind} 32`]!) - median(samples[`${kind} 1`]!)) / 31;
console.log(
  `per engine: launcher ${per("launcher").toFixed(1)} ms, python ${
    per("python").toFixed(1)
  } ms; launcher 32 ÷ python 32: ${
    (median(samples["launcher 32"]!) / median(samples["python 32"]!)).toFixed(2)
  }`,
);
