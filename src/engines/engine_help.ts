/**
 * Engine flags checked against the installed engine's own help: once per
 * distinct executable, the help its kind names is run (`vllm serve
 * --help=all`, `python3 -m sglang.launch_server --help`, `llama-server
 * --help`) with a time limit, parsed by the kind, and each card's `args`
 * checked against it. Only a dry run asks: a start leaves unknown flags to the
 * engine's own parser.
 *
 * @module
 */
import type { ModelCard } from "../catalogue.ts";
import { ENGINE_KINDS, executableOf } from "./kinds.ts";
import type { EngineFlags } from "./kinds/engine_kind.ts";
import { signalGroup } from "./process_group.ts";
import { unknownFlagWarnings } from "./unknown_flags.ts";

/**
 * The unknown-flag warnings of these cards, from their engines' help; for an
 * engine whose help cannot be read, one line naming its cards and why:
 * `qwen3-8b: flags not checked (vllm not found on PATH)`. Kinds without help
 * (`command`) are not checked.
 *
 * @param cards The expanded cards, in request order.
 * @param options `timeoutMs`: how long one engine's help may take before it
 *   is killed (10 s).
 * @returns The warnings, by executable in the order cards first name it.
 */
export async function flagWarnings(
  cards: readonly ModelCard[],
  options: { readonly timeoutMs?: number } = {},
): Promise<string[]> {
  const asks = new Map<
    string,
    { cards: ModelCard[]; listed: Promise<string[] | string> }
  >();
  for (const card of cards) {
    const kind = ENGINE_KINDS[card.engine];
    if (kind?.flags === undefined) continue;
    const executable = executableOf(card, kind);
    const key = [executable, ...kind.flags.helpArgv].join(" ");
    let ask = asks.get(key);
    if (ask === undefined) {
      const listed = readHelp(executable, kind.flags, options.timeoutMs);
      asks.set(key, ask = { cards: [], listed });
    }
    ask.cards.push(card);
  }
  const warnings: string[] = [];
  for (const { cards: group, listed } of asks.values()) {
    const flags = await listed;
    if (typeof flags === "string") {
      const names = group.map((card) => card.name).join(", ");
      warnings.push(`${names}: flags not checked (${flags})`);
      continue;
    }
    for (const card of group) {
      warnings.push(
        ...unknownFlagWarnings(card, ENGINE_KINDS[card.engine]!, flags),
      );
    }
  }
  return warnings;
}

/**
 * Runs an engine's help in its own process group, killed with its children
 * after `timeoutMs`.
 *
 * @returns The flags it lists, or why none could be read.
 */
async function readHelp(
  executable: string,
  flags: EngineFlags,
  timeoutMs = 10_000,
): Promise<string[] | string> {
  const command = [executable, ...flags.helpArgv].join(" ");
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command(executable, {
      args: [...flags.helpArgv],
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      detached: true,
    }).spawn();
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) {
      return `${command} cannot run: ${(error as Error).message}`;
    }
    return executable.includes("/")
      ? `${executable} not found`
      : `${executable} not found on PATH`;
  }
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    signalGroup(child.pid, "SIGKILL");
  }, timeoutMs);
  const out = await child.output().finally(() => clearTimeout(timer));
  if (timedOut) {
    return `${command} gave no answer within ${timeoutMs / 1000} s`;
  }
  if (!out.success) {
    const last = new TextDecoder().decode(out.stderr).trim().split("\n").at(-1);
    return `${command} exited with code ${out.code}${
      last ? `: ${last.slice(0, 200)}` : ""
    }`;
  }
  const listed = flags.parseHelp(new TextDecoder().decode(out.stdout));
  return listed.length > 0 ? listed : `${command} listed no flags`;
}
