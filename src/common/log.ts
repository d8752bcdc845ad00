/**
 * The one logger library code writes through: a line a message on stderr,
 * unless an embedding program replaces the sink. Folder `common/`: what every
 * room shares. It knows nothing of processes, HTTP, the catalogue or engines.
 *
 * @module
 */
export type LogLevel = "debug" | "info" | "warn" | "error";

const RANK: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };
const encoder = new TextEncoder();

function stderrSink(level: LogLevel, message: string): void {
  const tag = level === "info" ? "" : `${level}: `;
  // Synchronous on purpose: lines must reach the terminal even when the process exits next.
  Deno.stderr.writeSync(encoder.encode(`[serve] ${tag}${message}\n`));
}

let sink = stderrSink;
let threshold: LogLevel = "info";

/**
 * Replaces, from now on, the level below which lines are dropped and/or the
 * sink that receives the lines kept.
 *
 * @returns The settings before, to restore later.
 *
 * @example
 * ```ts
 * import { configureLogging } from "@mymodel/serve/common";
 * const previous = configureLogging({ level: "error" });
 * configureLogging(previous);
 * ```
 */
export function configureLogging(options: {
  level?: "debug" | "info" | "warn" | "error";
  sink?: (level: "debug" | "info" | "warn" | "error", message: string) => void;
}): {
  level: "debug" | "info" | "warn" | "error";
  sink: (level: "debug" | "info" | "warn" | "error", message: string) => void;
} {
  const previous = { level: threshold, sink };
  if (options.level) threshold = options.level;
  if (options.sink) sink = options.sink;
  return previous;
}

function emit(level: LogLevel, message: string): void {
  if (RANK[level] >= RANK[threshold]) sink(level, message);
}

export const log: Record<LogLevel, (message: string) => void> = {
  debug: (message) => emit("debug", message),
  info: (message) => emit("info", message),
  warn: (message) => emit("warn", message),
  error: (message) => emit("error", message),
};
