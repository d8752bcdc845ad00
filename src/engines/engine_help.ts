// Card flags checked against the installed engine's own help, once per
// distinct executable. Only a dry run asks: a start leaves unknown flags to
// the engine's own parser.
import type { ModelCard } from "../catalogue.ts";
import { ENGINE_KINDS, executableOf } from "./kinds.ts";
import type { EngineFlags } from "./kinds/engine_kind.ts";
import { runHelper } from "./helper_run.ts";
import { unknownFlagWarnings } from "./unknown_flags.ts";

/** Help that cannot be read is one line: `qwen3-8b: flags not checked (vllm not found on PATH)`. */
export async function flagWarnings(
  cards: readonly ModelCard[],
  options: { readonly timeoutMs?: number; readonly signal?: AbortSignal } = {},
): Promise<string[]> {
  type Ask = { cards: ModelCard[]; listed: Promise<string[] | string> };
  const asks = new Map<string, Ask>();
  for (const card of cards) {
    const kind = ENGINE_KINDS[card.engine];
    if (kind?.flags === undefined) continue;
    const executable = executableOf(card, kind);
    const key = [executable, ...kind.flags.helpArgv].join(" ");
    let ask = asks.get(key);
    if (ask === undefined) {
      const listed = readHelp(executable, kind.flags, options);
      asks.set(key, ask = { cards: [], listed });
    }
    ask.cards.push(card);
  }
  const warnings = [...asks.values()].map(async ({ cards: group, listed }) => {
    const flags = await listed;
    if (typeof flags !== "string") {
      return group.flatMap((card) =>
        unknownFlagWarnings(card, ENGINE_KINDS[card.engine]!, flags)
      );
    }
    const names = group.map((card) => card.name).join(", ");
    return [`${names}: flags not checked (${flags})`];
  });
  return (await Promise.all(warnings)).flat();
}

async function readHelp(
  executable: string,
  flags: EngineFlags,
  { timeoutMs = 10_000, signal }: { timeoutMs?: number; signal?: AbortSignal },
): Promise<string[] | string> {
  const command = [executable, ...flags.helpArgv].join(" ");
  let run;
  try {
    run = await runHelper(executable, flags.helpArgv, { timeoutMs, signal });
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) {
      return `${command} cannot run: ${(error as Error).message}`;
    }
    return executable.includes("/")
      ? `${executable} not found`
      : `${executable} not found on PATH`;
  }
  if (run === "timeout") {
    return `${command} gave no answer within ${timeoutMs / 1000} s`;
  }
  if (!run.status.success) {
    const last = run.stderr.trim().split("\n").at(-1);
    const tail = last ? `: ${last.slice(0, 200)}` : "";
    return `${command} exited with code ${run.status.code}${tail}`;
  }
  const listed = flags.parseHelp(run.stdout);
  return listed.length > 0 ? listed : `${command} listed no flags`;
}
