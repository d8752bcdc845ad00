import type { EngineContext, EngineKind } from "./engine_kind.ts";

const PLACEHOLDER = /\{(model|host|port|name|api_key)\}/g;

function templateArgv(ctx: EngineContext): string[] {
  const values: Record<string, string> = {
    model: ctx.model,
    host: ctx.host,
    port: String(ctx.port),
    name: ctx.card.name,
    api_key: ctx.apiKey,
  };
  const template = (ctx.card.command ?? []).slice(1);
  const out: string[] = [];
  for (const part of template) {
    // Without a key, an argument that carries it is dropped, and so is the flag just before it.
    if (!ctx.apiKey && part.includes("{api_key}")) {
      if (part === "{api_key}" && out.at(-1)?.startsWith("-")) out.pop();
      continue;
    }
    out.push(part.replace(PLACEHOLDER, (_, key: string) => values[key] ?? ""));
  }
  return [...out, ...ctx.card.args];
}

export const COMMAND: EngineKind = {
  name: "command",
  title: "command",
  executable: "",
  install: "install the program the card's command names",
  argv: templateArgv,
  devices: () => ({ kind: "unplaced", from: "engine command" }),
};
