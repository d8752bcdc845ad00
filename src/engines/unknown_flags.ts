// A card's `args` checked against the flags its engine's help lists, read as
// the engine reads them; a warning, never a refusal. Pure.
import type { ModelCard } from "../catalogue.ts";
import { closeMatches } from "../common/close_matches.ts";
import type { EngineKind } from "./kinds/engine_kind.ts";

/** `qwen3-8b: --max-model-length is not a known vLLM flag (did you mean --max-model-len?)` */
export function unknownFlagWarnings(
  card: ModelCard,
  kind: EngineKind,
  listed: readonly string[],
): string[] {
  const flags = new Set(listed);
  const bare = listed.map((f) => f.replace(/^-+/, ""));
  const warnings: string[] = [];
  const seen = new Set<string>();
  for (const token of card.args) {
    // A value such as -1 or a path is not a flag.
    if (!/^--?[A-Za-z]/.test(token)) continue;
    let flag = token.replace(/=.*$/s, "");
    if (kind.flags?.underscores && flag.startsWith("--")) {
      flag = flag.replaceAll("_", "-");
    }
    // argparse also takes an unambiguous start of a long flag.
    const abbreviates = kind.flags?.prefixes && flag.startsWith("--") &&
      listed.filter((known) => known.startsWith(flag)).length === 1;
    if (seen.has(flag) || flags.has(flag) || abbreviates) continue;
    seen.add(flag);
    const [best] = closeMatches(flag.replace(/^-+/, ""), bare, 1);
    const hint = best === undefined
      ? ""
      : ` (did you mean ${listed[bare.indexOf(best)]}?)`;
    const unknown = `${flag} is not a known ${kind.title} flag`;
    warnings.push(`${card.name}: ${unknown}${hint}`);
  }
  return warnings;
}
