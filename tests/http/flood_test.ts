/**
 * Connection floods against the launcher's CLI in a subprocess whose
 * open-files limit is set by `sh -c 'ulimit ...; exec deno ...'` (this test
 * runner's own limit is left alone), over a stand-in engine.
 */
import assert from "node:assert/strict";
import {
  fakeBin,
  freePorts,
  makeRoot,
  pathWith,
  pidAlive,
  readRecord,
  siteArgs,
  waitFor,
} from "../support/helpers.ts";

const MOD = new URL("../../mod.ts", import.meta.url).pathname;
const FLOOD = 1_100;
const encoder = new TextEncoder();

/** The launcher under `ulimit` limits, its stderr collected. */
class LimitedLauncher implements AsyncDisposable {
  readonly lines: string[] = [];
  readonly port = freePorts(1);
  #child: Deno.ChildProcess | undefined;
  #done: Promise<unknown> = Promise.resolve();
  #dirs: string[] = [];
  records = "";

  async start(
    limits: string,
    args: readonly string[] = [],
    flags: readonly string[] = [],
  ): Promise<void> {
    const root = await makeRoot();
    const bin = await fakeBin();
    this.records = await Deno.makeTempDir({ prefix: "serve-rec-" });
    this.#dirs = [root, bin, this.records];
    const deno = [
      Deno.execPath(),
      "run",
      "-A",
      ...flags,
      "--quiet",
      MOD,
      "alpha",
      ...siteArgs(this.port, root),
      ...args,
    ].map((a) => `'${a}'`).join(" ");
    this.#child = new Deno.Command("sh", {
      args: ["-c", `${limits}; exec ${deno}`],
      env: {
        NO_COLOR: "1",
        PATH: pathWith(bin),
        FAKE_ENGINE_RECORD_DIR: this.records,
        NUCLEUS_MODE: "dev",
      },
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
    const lines = this.lines;
    this.#done = (async () => {
      let rest = "";
      const stream = this.#child!.stderr.pipeThrough(new TextDecoderStream());
      for await (const chunk of stream) {
        const parts = (rest + chunk).split("\n");
        rest = parts.pop() ?? "";
        lines.push(...parts);
      }
      if (rest) lines.push(rest);
    })();
    await waitFor(
      () => lines.some((l) => l.includes("listening on")),
      "the launcher to listen",
      20_000,
    );
  }

  get alive(): boolean {
    return this.#child !== undefined && pidAlive(this.#child.pid);
  }

  async enginePid(): Promise<number> {
    let pid = 0;
    await waitFor(async () => {
      pid = (await readRecord(this.records, this.port + 1))?.pid ?? 0;
      return pid > 0;
    }, "the engine's record");
    return pid;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    try {
      this.#child?.kill("SIGTERM");
    } catch {
      // Already exited.
    }
    await this.#child?.status;
    await this.#done;
    for (const dir of this.#dirs) {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  }
}

/** Opens `count` connections (some may be refused or closed at once), each sending `send`. */
async function flood(
  port: number,
  count: number,
  send = "",
): Promise<Deno.TcpConn[]> {
  const conns: Deno.TcpConn[] = [];
  for (let i = 0; i < count; i += 100) {
    const batch = await Promise.allSettled(
      Array.from(
        { length: Math.min(100, count - i) },
        () => Deno.connect({ hostname: "127.0.0.1", port }),
      ),
    );
    for (const result of batch) {
      if (result.status === "fulfilled") conns.push(result.value);
    }
  }
  if (send) {
    await Promise.allSettled(
      conns.map((c) => c.write(encoder.encode(send))),
    );
  }
  return conns;
}

function closeAll(conns: Deno.Conn[]): void {
  for (const conn of conns) {
    try {
      conn.close();
    } catch {
      // Closed by the server already.
    }
  }
}

/** Until `/health` answers 200, polling; `ms` only guards a hang. */
async function healthWithin(port: number, ms: number): Promise<void> {
  await waitFor(
    async () => {
      try {
        const response = await fetch(`http://127.0.0.1:${port}/health`, {
          signal: AbortSignal.timeout(500),
        });
        await response.body?.cancel();
        return response.ok;
      } catch {
        return false;
      }
    },
    `/health within ${ms} ms`,
    ms,
  );
}

for (
  const [what, args] of [
    ["connections capped to the open-files limit", []],
    ["no cap (prlimit denied): accepts fail with EMFILE", [
      "--deny-run=prlimit",
    ]],
  ] as const
) {
  Deno.test(`soft = hard = 1024, ${what}: 1,100 idle and 1,100 half-sent connections leave the launcher and its engine running`, async () => {
    await using launcher = new LimitedLauncher();
    await launcher.start("ulimit -Sn 1024; ulimit -Hn 1024", [], args);
    const engine = await launcher.enginePid();
    await healthWithin(launcher.port, 5_000);
    const idle = await flood(launcher.port, FLOOD);
    const half = await flood(
      launcher.port,
      FLOOD,
      "GET /health HTTP/1.1\r\nHost: x\r\n",
    );
    await new Promise((r) => setTimeout(r, 1_000));
    assert.ok(launcher.alive, launcher.lines.join("\n"));
    closeAll([...idle, ...half]);
    // Answers again once the flood is gone (the deadline only guards a hang).
    await healthWithin(launcher.port, 10_000);
    assert.ok(launcher.alive);
    assert.ok(pidAlive(engine), "the engine was killed");
    assert.equal(await launcher.enginePid(), engine, "the engine restarted");
    const log = launcher.lines.join("\n");
    assert.doesNotMatch(log, /shutting down/);
    if (args.length === 0) assert.match(log, /open files: limit 1024/);
    else assert.match(log, /Cannot accept a connection: .*open files/);
  });
}

Deno.test("soft 1024 under a higher hard limit: 1,100 idle connections are all held and /health answers during the flood", async () => {
  await using launcher = new LimitedLauncher();
  await launcher.start("ulimit -Sn 1024", ["--max-connections", "2000"]);
  await launcher.enginePid();
  const conns = await flood(launcher.port, FLOOD);
  try {
    assert.equal(conns.length, FLOOD);
    await new Promise((r) => setTimeout(r, 500));
    // The flood stays open until the end: any answer is one during it.
    await healthWithin(launcher.port, 10_000);
    // Every flood connection is still open and served: none was shed.
    const answers = await Promise.all(conns.map(async (conn) => {
      await conn.write(
        encoder.encode("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"),
      );
      const buffer = new Uint8Array(1024);
      const n = await conn.read(buffer);
      return n !== null && new TextDecoder().decode(buffer.subarray(0, 12));
    }));
    assert.equal(answers.filter((a) => a === "HTTP/1.1 200").length, FLOOD);
    assert.match(launcher.lines.join("\n"), /open files: limit \d{4,}/);
  } finally {
    closeAll(conns);
  }
});
