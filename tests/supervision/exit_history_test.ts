/**
 * Exit causes and their history over the launcher in a subprocess and stand-in engines printing
 * real engines' lines (tests/fixtures/engine_lines.ts): the cause from the
 * run that ended, `failed` retried by itself, engine text cleaned at capture,
 * the history kept across a reload.
 */
import assert from "node:assert/strict";
import {
  fakeBin,
  freePorts,
  getJson,
  launch,
  Launcher,
  makeRoot,
  pathWith,
  pidAlive,
  readJournal,
  type Setup,
  siteArgs,
  waitFor,
  withinGuard,
} from "../support/helpers.ts";

const CARDS =
  new URL("../fixtures/exit_history.yaml", import.meta.url).pathname;

interface Entry {
  state: string;
  pid: number | null;
  restarts: number;
  next_restart: string | null;
  last_exit:
    | {
      at: string;
      cause: string;
      message: string | null;
      signal: string | null;
    }
    | null;
}

async function detail(s: Setup): Promise<Record<string, Entry>> {
  const { body } = await getJson(
    `http://127.0.0.1:${s.port}/models?detail=1`,
  );
  return (body as { active: Record<string, Entry> }).active;
}

Deno.test("a 404 for an optional file while loading decides nothing: a served run's segfault is a signal, twice, never failed", async () => {
  await using s = await launch(["optional-404"], {
    catalogue: CARDS,
    args: ["--health-interval", "0.2"],
  });
  await s.launcher.ready();
  const exits: Entry["last_exit"][] = [];
  await waitFor(
    async () => {
      const e = (await detail(s))["optional-404"]!;
      if (e.last_exit && exits.at(-1)?.at !== e.last_exit.at) {
        exits.push(e.last_exit);
      }
      assert.notEqual(e.state, "failed");
      return e.restarts >= 2;
    },
    "two crashes and restarts",
    30_000,
  );
  assert.ok(exits.length >= 2, JSON.stringify(exits));
  for (const exit of exits) {
    assert.equal(exit!.cause, "signal");
    assert.equal(exit!.signal, "SIGSEGV");
    assert.equal(exit!.message, null);
  }
  const states = (await readJournal(s.root)).filter((e) =>
    e.model === "optional-404"
  )
    .map((e) => e.to);
  assert.ok(!states.includes("failed"), String(states));
  assert.ok(
    !s.launcher.stderr.includes("model-not-found"),
    s.launcher.stderr,
  );
});

Deno.test("an exit line full of escape sequences: the launcher's line, last_exit.message and the journal keep the words, not the sequences", async () => {
  await using s = await launch(["hostile"], {
    catalogue: CARDS,
    args: ["--health-interval", "0.2"],
  });
  await s.launcher.ready();
  const words =
    "torch.OutOfMemoryError: CUDA out of memory. [serve] error: fake";
  let e: Entry | undefined;
  await waitFor(async () => {
    e = (await detail(s)).hostile;
    return e?.last_exit !== null && e?.last_exit !== undefined;
  }, "an exit");
  assert.equal(e!.last_exit!.cause, "gpu-out-of-memory");
  assert.equal(e!.last_exit!.message, words);
  const line = await s.launcher.waitForLine(/engine hostile \(pid \d+\) exit:/);
  assert.ok(line.includes(`(gpu-out-of-memory: ${words})`), line);
  // deno-lint-ignore no-control-regex -- none may reach a terminal
  const control = /[\x00-\x08\x0b-\x1f\x7f-\x9f]/;
  assert.ok(
    !control.test(s.launcher.stderr),
    JSON.stringify(s.launcher.stderr),
  );
  let events: Record<string, unknown>[] = [];
  await waitFor(async () => {
    events = (await readJournal(s.root)).filter((x) =>
      x.model === "hostile" && typeof x.detail === "string" &&
      (x.detail as string).includes("exit:")
    );
    return events.length > 0;
  }, "the exit in the journal");
  for (const event of events) {
    assert.ok((event.detail as string).includes(words), String(event.detail));
    assert.ok(!control.test(event.detail as string));
  }
  // The engine's own log keeps what it wrote.
  const raw = await Deno.readTextFile(`${s.root}/logs/hostile.log`);
  assert.ok(raw.includes("\x1b]52;c;ZXZpbA==\x07"));
});

Deno.test("a reload that restarts an engine keeps its restarts, last exit and exit counts", async () => {
  const dir = await Deno.makeTempDir({ prefix: "serve-cat-" });
  const path = `${dir}/catalogue.yaml`;
  const text = await Deno.readTextFile(CARDS);
  await Deno.writeTextFile(path, text);
  try {
    await using s = await launch(["crasher", "steady"], {
      catalogue: path,
      args: ["--health-interval", "0.2"],
    });
    await s.launcher.ready();
    let before: Record<string, Entry> = {};
    await waitFor(
      async () => {
        before = await detail(s);
        return before.crasher!.restarts >= 2 &&
          before.steady!.state === "ready";
      },
      "two restarts",
      20_000,
    );
    const steadyPid = before.steady!.pid;
    await Deno.writeTextFile(
      path,
      text.replace(
        "fake-crash-after-ms: 300 }",
        "fake-crash-after-ms: 30000 }",
      ),
    );
    const lines = s.launcher.lines.length;
    s.launcher.child.kill("SIGHUP");
    await waitFor(
      () =>
        s.launcher.lines.slice(lines).some((l) =>
          /reload: 1 engine restarted \(crasher\)/.test(l)
        ),
      "the reload",
    );
    let after: Record<string, Entry> = {};
    await waitFor(async () => {
      after = await detail(s);
      return after.crasher!.state === "ready";
    }, "crasher ready again");
    assert.ok(
      after.crasher!.restarts >= before.crasher!.restarts,
      `${after.crasher!.restarts} < ${before.crasher!.restarts}`,
    );
    assert.notEqual(after.crasher!.last_exit, null);
    assert.equal(after.steady!.pid, steadyPid, "steady keeps its pid");
    const prom = await Deno.readTextFile(
      `${s.root}/metrics/mymodel_serve_${s.port}.prom`,
    );
    const exits = [
      ...prom.matchAll(
        /^mymodel_engine_exits_total\{[^}]*model="crasher"[^}]*\} (\d+)/gm,
      ),
    ].reduce((sum, m) => sum + Number(m[1]), 0);
    assert.ok(exits >= before.crasher!.restarts, `${exits} exits counted`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("failed is tried again by itself after --failed-retry, journaled with reason retry; a card's failed_retry: 0 never", async () => {
  const dir = await Deno.makeTempDir({ prefix: "serve-cat-" });
  const path = `${dir}/catalogue.yaml`;
  const text = await Deno.readTextFile(CARDS);
  await Deno.writeTextFile(
    path,
    text + `  hub-401-never:
    verb: chat
    hub: org/hub-401-never
    failed_retry: 0
    args: {
      fake-lines: vllm-hub,
      fake-crash-after-ms: 50,
      fake-exit-code: 1,
      fake-listen-after-ms: 5000,
    }
`,
  );
  try {
    await using s = await launch(["hub-401", "hub-401-never", "steady"], {
      catalogue: path,
      args: ["--failed-retry", "2", "--health-interval", "0.2"],
    });
    await s.launcher.ready();
    let failed: Record<string, Entry> = {};
    await waitFor(
      async () => {
        failed = await detail(s);
        return failed["hub-401"]!.state === "failed" &&
          failed["hub-401-never"]!.state === "failed" &&
          failed.steady!.state === "ready";
      },
      "both failed",
      20_000,
    );
    const steadyPid = failed.steady!.pid;
    const next = failed["hub-401"]!.next_restart;
    assert.notEqual(next, null, "next_restart names the retry");
    // Due after the exit that failed it; "in 2 s" is the launcher's word below.
    assert.ok(next! > failed["hub-401"]!.last_exit!.at, `${next}`);
    assert.equal(failed["hub-401-never"]!.next_restart, null);
    assert.match(
      s.launcher.stderr,
      /engine hub-401 \(pid \d+\) exit: .*; not restarted: model-not-found twice in a row \(fix the card or its files, then reload\); tried again in 2 s; log /,
    );
    await waitFor(
      async () => {
        const e = (await detail(s))["hub-401"]!;
        return e.restarts >= 2 && e.state === "failed";
      },
      "retried, failed again",
      20_000,
    );
    const events = (await readJournal(s.root)).filter((e) =>
      e.model === "hub-401"
    );
    const retry = events.find((e) => e.reason === "retry");
    assert.ok(retry, JSON.stringify(events));
    assert.equal(retry.from, "failed");
    const after = await detail(s);
    assert.equal(after["hub-401-never"]!.restarts, 1, "never tried again");
    assert.equal(after.steady!.pid, steadyPid);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a bad --failed-retry or failed_retry is refused in one line, nothing started", async () => {
  const root = await makeRoot();
  const bin = await fakeBin();
  try {
    const cases: [string[], string, RegExp][] = [
      [
        ["--failed-retry", "-1"],
        "",
        /Cannot use --failed-retry=-1: expected 0 or a decimal number of seconds from 0\.001/,
      ],
      [
        ["--failed-retry", "soon"],
        "",
        /Cannot use --failed-retry=soon: expected 0 or a decimal number of seconds from 0\.001/,
      ],
      [
        [],
        "-1",
        /card 'a', field 'failed_retry' \(line 2\): expected 0 \(never tried again\) or a decimal number of seconds from 0\.001 to 2147483\.647 .*, got -1$/,
      ],
      [
        [],
        "soon",
        /field 'failed_retry' \(line 2\): expected 0 \(never tried again\) or .*, got 'soon'$/,
      ],
    ];
    for (const [flags, field, refusal] of cases) {
      const catalogue = `${root}/c.yaml`;
      await Deno.writeTextFile(
        catalogue,
        `models:\n  a: { verb: chat, hub: o/a${
          field ? `, failed_retry: ${field}` : ""
        } }\n`,
      );
      await using launcher = new Launcher([
        "a",
        ...siteArgs(freePorts(1), root, catalogue),
        ...flags,
      ], { PATH: pathWith(bin) });
      const status = await launcher.exited();
      assert.equal(status.code, field ? 1 : 2, launcher.stderr);
      assert.equal(launcher.lines.filter(Boolean).length, 1, launcher.stderr);
      assert.match(launcher.stderr, refusal);
    }
    assert.deepEqual([...Deno.readDirSync(`${root}/logs`)], []);
  } finally {
    await Deno.remove(root, { recursive: true });
    await Deno.remove(bin, { recursive: true });
  }
});

Deno.test("logs/events.jsonl a FIFO with no reader: one warning, the launcher runs, SIGTERM ends it promptly, metrics file written a last time saying stopped", async () => {
  const root = await makeRoot();
  await new Deno.Command("mkfifo", { args: [`${root}/logs/events.jsonl`] })
    .output();
  await using s = await launch(["steady"], {
    catalogue: CARDS,
    root,
    args: ["--health-interval", "0.2", "--grace", "2"],
  });
  await s.launcher.ready();
  const metrics = `${root}/metrics/mymodel_serve_${s.port}.prom`;
  await waitFor(
    async () => (await detail(s)).steady!.state === "ready",
    "ready",
  );
  await waitFor(
    () => Deno.stat(metrics).then(() => true, () => false),
    "metrics",
  );
  const pid = (await detail(s)).steady!.pid!;
  const warnings = s.launcher.lines.filter((l) => /journal/.test(l));
  assert.deepEqual(warnings, [
    `[serve] warn: Cannot use the journal ${root}/logs/events.jsonl: it is a FIFO (expected a regular file, or none yet): the journal is off`,
  ]);
  // A write to the FIFO would block the stop for good: the guard fails that.
  const status = await withinGuard(s.launcher.stop(), "the stop");
  assert.equal(status.code, 0, s.launcher.stderr);
  assert.ok(!pidAlive(pid), "the engine is gone");
  assert.match(
    await Deno.readTextFile(metrics),
    new RegExp(`^mymodel_launcher_stopped\\{port="${s.port}"\\} 1$`, "m"),
  );
});

/** A loopback catalogue server: the file's text, or (once `hang` is set) a body that never ends. */
function catalogueServer(text: string) {
  const hung: ReadableStreamDefaultController<Uint8Array>[] = [];
  const state = { hang: false, trickle: false };
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => {
      if (!state.hang && !state.trickle) return new Response(text);
      const bytes = new TextEncoder().encode(text);
      let timer: ReturnType<typeof setInterval> | undefined;
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          hung.push(controller);
          controller.enqueue(bytes.subarray(0, 10));
          // A byte a second: alive, never done.
          if (state.trickle) {
            timer = setInterval(
              () => controller.enqueue(bytes.subarray(10, 11)),
              1000,
            );
          }
        },
        cancel() {
          clearInterval(timer);
        },
      });
      return new Response(body);
    },
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}/catalogue.yaml`,
    state,
    /** Bodies begun and never ended so far. */
    get hung(): number {
      return hung.length;
    },
    async [Symbol.asyncDispose]() {
      for (const c of hung) {
        try {
          c.close();
        } catch { /* cancelled */ }
      }
      await server.shutdown();
    },
  };
}

Deno.test("SIGTERM during a reload whose URL catalogue never finishes its body: stopped within --grace plus a few seconds, engines gone, exit 0", async () => {
  await using cat = catalogueServer(await Deno.readTextFile(CARDS));
  await using s = await launch(["steady"], {
    catalogue: cat.url,
    args: ["--grace", "2"],
  });
  await s.launcher.ready();
  await waitFor(
    async () => (await detail(s)).steady!.state === "ready",
    "ready",
  );
  const pid = (await detail(s)).steady!.pid!;
  cat.state.hang = true;
  s.launcher.child.kill("SIGHUP");
  await waitFor(() => cat.hung > 0, "the reload reading the endless body");
  // The body never ends: a stop that waited for the reload would never end.
  const status = await withinGuard(s.launcher.stop(), "the stop");
  assert.equal(status.code, 0, s.launcher.stderr);
  assert.ok(!pidAlive(pid), "the engine is gone");
  assert.match(
    s.launcher.stderr,
    /reload refused: Cannot load catalogue http:\/\/127\.0\.0\.1:\d+\/catalogue\.yaml: the launcher is stopping/,
  );
});
