/**
 * Catalogues read from a URL: a loopback `Deno.serve` that answers, answers
 * 404, never answers or stops half-way, and a port with nothing listening.
 * Each failure is one line naming the URL and what was expected, in bounded
 * time.
 */
import assert from "node:assert/strict";
import { CatalogueError, Registry } from "../../src/catalogue.ts";

const CATALOGUE_MODULE =
  new URL("../../src/catalogue.ts", import.meta.url).href;
const DENO_JSON = new URL("../../deno.json", import.meta.url).pathname;
const CATALOGUE = "models:\n  m: { verb: chat, hub: org/m }\n";

/** A loopback server whose handler is `handler`; on dispose, pending answers are released and it shuts down. */
function serve(
  handler: (release: Promise<void>) => Response | Promise<Response>,
) {
  const released = Promise.withResolvers<void>();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => handler(released.promise),
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}/catalogue.yaml`,
    async [Symbol.asyncDispose]() {
      released.resolve();
      await server.shutdown();
    },
  };
}

/**
 * The CatalogueError `promise` rejects with; a hang fails after 5 s (the
 * bound: the refusals come from their own timeouts or at once, never from a
 * clock the test reads).
 */
async function refusal(
  promise: Promise<unknown>,
): Promise<{ error: CatalogueError }> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const hang = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error("still waiting after 5 s")),
      5_000,
    );
  });
  try {
    await Promise.race([promise, hang]);
  } catch (error) {
    assert.ok(error instanceof CatalogueError, String(error));
    assert.ok(!/[\r\n]/.test(error.message), error.message);
    return { error };
  } finally {
    clearTimeout(timer);
    promise.catch(() => {});
  }
  assert.fail("expected a CatalogueError");
}

Deno.test("a catalogue is read from an http: URL", async () => {
  await using server = serve(() => new Response(CATALOGUE));
  const registry = await Registry.load(server.url);
  assert.equal(registry.file, server.url);
  assert.ok(registry.has("m"));
});

Deno.test("a URL that never answers fails at the timeout, naming the URL", async () => {
  await using server = serve(async (release) => {
    await release;
    return new Response(CATALOGUE);
  });
  const { error } = await refusal(
    Registry.load(server.url, { timeout: 300 }),
  );
  assert.equal(
    error.message,
    `Cannot load catalogue ${server.url}: no complete answer within 0.3 s (expected the server to send the catalogue within 0.3 s)`,
  );
});

Deno.test("a URL whose body stops half-way fails at the timeout", async () => {
  let body: ReadableStreamDefaultController<Uint8Array> | undefined;
  await using server = serve(() =>
    new Response(
      new ReadableStream<Uint8Array>({
        start(controller) {
          body = controller;
          controller.enqueue(new TextEncoder().encode("models:\n"));
        },
      }),
    )
  );
  try {
    const { error } = await refusal(
      Registry.load(server.url, { timeout: 300 }),
    );
    assert.match(error.message, /: no complete answer within 0\.3 s \(/);
  } finally {
    try {
      body?.close();
    } catch { /* the client's abort closed it */ }
  }
});

Deno.test("a URL answering 404 names the status and what was expected", async () => {
  await using server = serve(() =>
    new Response("no such file", { status: 404, statusText: "Not Found" })
  );
  const { error } = await refusal(Registry.load(server.url));
  assert.equal(
    error.message,
    `Cannot load catalogue ${server.url}: the server answered 404 Not Found (expected 200 with the catalogue's YAML)`,
  );
});

Deno.test("a URL with nothing listening says the connection was refused, not 'fetch failed'", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const url = `http://127.0.0.1:${listener.addr.port}/catalogue.yaml`;
  listener.close();
  const { error } = await refusal(Registry.load(url));
  assert.match(
    error.message,
    new RegExp(
      `^Cannot load catalogue ${url}: cannot fetch it: tcp connect error: Connection refused \\(os error 111\\) \\(expected a reachable HTTP server serving the catalogue at that URL\\)$`,
    ),
  );
  assert.doesNotMatch(error.message, /fetch failed/);
});

Deno.test("a URL of another scheme is refused, not read as a file path", async () => {
  const dir = await Deno.makeTempDir({ prefix: "serve-ftp-" });
  try {
    // Were "ftp://host/c.yaml" read as a path, this file would be found. The
    // load runs in a process started in `dir`: a chdir here would move every
    // test file running in parallel with this one.
    await Deno.mkdir(`${dir}/ftp:/host`, { recursive: true });
    await Deno.writeTextFile(`${dir}/ftp:/host/c.yaml`, CATALOGUE);
    const script = `
      import { Registry } from ${JSON.stringify(CATALOGUE_MODULE)};
      for (const source of ["ftp://host/c.yaml", new URL("ftp://host/c.yaml")]) {
        await Registry.load(source).then(
          () => console.log("loaded"),
          (error) => console.log(error.name, error.message),
        );
      }`;
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["eval", "--config", DENO_JSON, script],
      cwd: dir,
      stdin: "null",
    }).output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, stderr);
    const refused =
      "CatalogueError Cannot load catalogue ftp://host/c.yaml: unsupported URL scheme 'ftp:' (expected a file path, or an http:, https: or file: URL)";
    assert.deepEqual(
      new TextDecoder().decode(out.stdout).split("\n").filter(Boolean),
      [refused, refused],
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

const MiB = 1024 * 1024;

/** A body of `bytes` YAML comment bytes in 1 MiB chunks, then, when `hold`, no end until released. */
function longBody(bytes: number, hold: Promise<void> | undefined) {
  const chunk = new TextEncoder().encode(`#${" ".repeat(MiB - 2)}\n`);
  let sent = 0;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (sent >= bytes) {
        if (hold) await hold;
        controller.close();
        return;
      }
      sent += chunk.length;
      controller.enqueue(chunk);
    },
  });
}

Deno.test("a URL body past 16 MiB is refused at the cap, in one line, without waiting for its end", async () => {
  // 17 MiB, then the body never ends: reading to the end would hang until the timeout.
  await using server = serve((release) =>
    new Response(longBody(17 * MiB, release))
  );
  const { error } = await refusal(
    Registry.load(server.url, { timeout: 4_000 }),
  );
  assert.equal(
    error.message,
    `Cannot load catalogue ${server.url}: it holds more than 16 MiB (expected a catalogue of at most 16 MiB)`,
  );
});

Deno.test("a URL announcing more than 16 MiB is refused before its body is read", async () => {
  await using server = serve(() =>
    new Response(longBody(17 * MiB, undefined), {
      headers: { "content-length": String(17 * MiB) },
    })
  );
  const { error } = await refusal(Registry.load(server.url));
  assert.equal(
    error.message,
    `Cannot load catalogue ${server.url}: it holds 17825792 bytes, more than 16 MiB (expected a catalogue of at most 16 MiB)`,
  );
});

Deno.test("a URL load ends when the caller's signal aborts, with the caller's reason as its line", async () => {
  await using server = serve(async (release) => {
    await release;
    return new Response(CATALOGUE);
  });
  const stop = new AbortController();
  const loading = Registry.load(server.url, { signal: stop.signal });
  setTimeout(
    () =>
      stop.abort(
        new Error(
          "no complete read within 0.2 s (expected a catalogue read within 0.2 s)",
        ),
      ),
    200,
  );
  const { error } = await refusal(loading);
  assert.equal(
    error.message,
    `Cannot load catalogue ${server.url}: no complete read within 0.2 s (expected a catalogue read within 0.2 s)`,
  );
  const already = AbortSignal.abort();
  const { error: before } = await refusal(
    Registry.load(server.url, { signal: already }),
  );
  assert.match(
    before.message,
    /: the load was stopped before the catalogue was read \(/,
  );
});
