/**
 * Prometheus' own checker, `promtool` (Debian: `apt-get install prometheus`),
 * found on PATH. Where it is missing, the tests that need it are ignored and
 * one line says so: never a silent pass.
 */

/** The line printed once when promtool cannot be run. */
export const NO_PROMTOOL =
  "promtool is not installed (Debian: apt-get install prometheus): the promtool checks are skipped";

async function runs(): Promise<boolean> {
  const allowed = await Deno.permissions.query({
    name: "run",
    command: "promtool",
  });
  if (allowed.state !== "granted") return false;
  try {
    const { success } = await new Deno.Command("promtool", {
      args: ["--version"],
      stdout: "null",
      stderr: "null",
    }).output();
    return success;
  } catch {
    return false;
  }
}

/** Whether promtool runs here; false prints {@linkcode NO_PROMTOOL} once. */
export const hasPromtool: boolean = await runs();
if (!hasPromtool) console.log(NO_PROMTOOL);

/** Runs `promtool <args>` (stdin: `input`), returning its exit status and stdout + stderr. */
export async function promtool(
  args: string[],
  input?: string,
): Promise<{ success: boolean; said: string }> {
  const child = new Deno.Command("promtool", {
    args,
    stdin: input === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  if (input !== undefined) {
    const writer = child.stdin.getWriter();
    await writer.write(new TextEncoder().encode(input));
    await writer.close();
  }
  const { success, stdout, stderr } = await child.output();
  const decoder = new TextDecoder();
  return { success, said: decoder.decode(stdout) + decoder.decode(stderr) };
}
