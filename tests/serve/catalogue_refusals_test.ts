/**
 * An operator's catalogue mistakes through the CLI (issue 31, items 2, 3, 9
 * and 10): a start and a `--dry-run` each exit 1 with one line naming the
 * input and what was expected; nothing is started, listened on or written.
 */
import assert from "node:assert/strict";
import { catalogueFile, refused } from "../support/refusals.ts";

Deno.test("a 300-character card name is refused naming the card, not with 'File name too long'", async () => {
  const name = `m${"x".repeat(299)}`;
  await using file = await catalogueFile(
    `models:\n  ${name}: { verb: chat, hub: org/m }\n`,
  );
  const line = await refused(
    [name],
    new RegExp(
      `^\\[serve\\] error: Cannot load catalogue ${file.path}: card '${name}' \\(line 2\\): card name of 300 characters \\(expected at most 128: `,
    ),
    { catalogue: file.path },
  );
  assert.doesNotMatch(line, /File name too long/);
});

Deno.test("a duplicate flag in args names the flag, not its first letter", async () => {
  await using file = await catalogueFile(
    "models:\n  m:\n    verb: chat\n    hub: org/m\n    args:\n      max-model-len: 4096\n      max-model-len: 8192\n",
  );
  await refused(
    ["m"],
    new RegExp(
      `^\\[serve\\] error: Cannot load catalogue ${file.path}: card 'm', field 'args' \\(line 7\\): duplicate key 'max-model-len' \\(expected each flag once in args; the first is on line 6\\)$`,
    ),
    { catalogue: file.path },
  );
});

Deno.test("a --catalogue URL that never answers fails after 10 s naming the URL, start and dry run alike", async () => {
  const released = Promise.withResolvers<void>();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    async () => {
      await released.promise;
      return new Response("models: {}\n");
    },
  );
  const url = `http://127.0.0.1:${server.addr.port}/catalogue.yaml`;
  try {
    // The line names the 10 s timeout: that one fired, not another.
    await refused(
      ["m"],
      new RegExp(
        `^\\[serve\\] error: Cannot load catalogue ${url}: no complete answer within 10 s \\(expected the server to send the catalogue within 10 s\\)$`,
      ),
      { catalogue: url },
    );
  } finally {
    released.resolve();
    await server.shutdown();
  }
});

Deno.test("a --catalogue URL with nothing listening, or of another scheme, is one line naming it", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const url = `http://127.0.0.1:${listener.addr.port}/catalogue.yaml`;
  listener.close();
  await refused(
    ["m"],
    new RegExp(
      `^\\[serve\\] error: Cannot load catalogue ${url}: cannot fetch it: tcp connect error: Connection refused \\(os error 111\\) \\(expected a reachable HTTP server serving the catalogue at that URL\\)$`,
    ),
    { catalogue: url },
  );
  await refused(
    ["m"],
    /^\[serve\] error: Cannot load catalogue ftp:\/\/example\.com\/catalogue\.yaml: unsupported URL scheme 'ftp:' \(expected a file path, or an http:, https: or file: URL\)$/,
    { catalogue: "ftp://example.com/catalogue.yaml" },
  );
});

Deno.test("an unknown model with the shipped catalogue says that catalogue was read and points at --catalogue", async () => {
  await refused(
    ["my-model"],
    /^\[serve\] error: Unknown model 'my-model': not in the shipped catalogue \S+\/catalogue\/optimizers\.yaml \(known: bge-m3, [^)]* and \d+ more; for a model of your own, write a catalogue and pass it with --catalogue\)$/,
    { catalogue: null },
  );
});

Deno.test("sleep_after on an engine no request can wake is refused in one line naming the card, sleep_after and why, start and dry run alike", async () => {
  const cases = [
    ["sglang", "no request can wake a sleeping SGLang engine"],
  ];
  for (const [engine, why] of cases) {
    await using file = await catalogueFile(
      `models:\n  m: { verb: chat, hub: org/m, engine: ${engine}, sleep_after: 600 }\n`,
    );
    await refused(
      ["m"],
      new RegExp(
        `^\\[serve\\] error: .*card 'm' sets sleep_after, which engine ${engine} cannot honour: ${why}`,
      ),
      { catalogue: file.path },
    );
  }
});
