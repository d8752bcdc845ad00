/**
 * The floor of draining a child's output in Deno: spawns the stand-in engine
 * with its stdout piped, reads and discards every byte, and passes the
 * engine's stderr (its `flood done in N ms` line) through. Usage:
 * `deno run -A bench/servers/pipe_drain.ts <engine arguments>`.
 *
 * @module
 */
const FAKE_ENGINE =
  new URL("../../tests/fixtures/fake_engine.ts", import.meta.url).pathname;

const child = new Deno.Command(Deno.execPath(), {
  args: ["run", "-A", "--quiet", FAKE_ENGINE, ...Deno.args],
  stdin: "null",
  stdout: "piped",
  stderr: "inherit",
}).spawn();
Deno.addSignalListener("SIGTERM", () => {
  child.kill("SIGTERM");
});
for await (const _ of child.stdout) {
  // Discard: only the read itself is measured.
}
await child.status;
