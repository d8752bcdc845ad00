/**
 * What an engine kind is: one object that knows everything engine-specific
 * (its command line, the GPUs and memory it takes, how its flags are listed
 * and spelled), asked by the other folders instead of their comparing engine
 * names. Kinds are pure: a card's settings in, a command line, a need or a
 * rule out; the help-reading runner is `engines/engine_help.ts`.
 *
 * @module
 */
import type { ModelCard } from "../../catalogue.ts";

/** What an engine's command line is built from. */
export interface EngineContext {
  /** Absolute local path of the weights, or the hub id. */
  readonly model: string;
  /** True when `model` is a local path. */
  readonly isLocal: boolean;
  readonly host: string;
  readonly port: number;
  /** The catalogue name, served as the model name. */
  readonly name: string;
  /** The API key the engine must demand; empty for none. */
  readonly apiKey: string;
  readonly card: ModelCard;
}

/**
 * The GPUs an engine takes when its card does not say: `count` whole devices,
 * a `share` of one device's memory, or `unplaced` (the launcher leaves its
 * environment alone). `from` says, for people, where the need came from.
 *
 * @example
 * ```ts ignore
 * const devices: EngineDevices = { kind: "whole", count: 2, from: "tensor-parallel-size 2" };
 * ```
 */
export type EngineDevices =
  | { readonly kind: "unplaced"; readonly from: string }
  | { readonly kind: "whole"; readonly count: number; readonly from: string }
  | { readonly kind: "share"; readonly share: number; readonly from: string };

/**
 * How an engine lists and reads its flags, for the unknown-flag warning.
 *
 * @example
 * ```ts ignore
 * const flags: EngineFlags = { helpArgv: ["--help"], parseHelp: argparseFlags, prefixes: true };
 * ```
 */
export interface EngineFlags {
  /** The arguments after the executable that print its help (`["serve", "--help=all"]`). */
  readonly helpArgv: readonly string[];
  /** The flags a help text lists, dashes included; pure. */
  parseHelp(text: string): string[];
  /** The engine reads `_` as `-` in long flags (vLLM does). */
  readonly underscores?: boolean;
  /** The engine takes an unambiguous start of a long flag (argparse's default). */
  readonly prefixes?: boolean;
}

/** Where a loading engine is: fetching weights, reading them, or the rest (compiling, profiling, the KV cache, graphs). */
export type LoadPhase = "downloading" | "loading" | "preparing";

/**
 * Why an engine run ended, from its exit and its own output: a rule's cause,
 * else `signal` when a signal ended it, else `exit`.
 */
export type ExitCause =
  | "gpu-out-of-memory"
  | "gpu-memory-profiling"
  | "port-in-use"
  | "bad-arguments"
  | "model-not-found"
  | "signal"
  | "exit";

/** Every exit cause, in the order the metrics list them. */
export const EXIT_CAUSES: readonly ExitCause[] = [
  "gpu-out-of-memory",
  "gpu-memory-profiling",
  "port-in-use",
  "bad-arguments",
  "model-not-found",
  "signal",
  "exit",
];

/**
 * What an engine's output lines say, as two tables of line patterns: a line
 * matching a phase rule puts the run in that phase (its two captures, when
 * present, are shards done and total); the first line matching a cause rule
 * decides the run's exit cause. Lines no rule knows change nothing.
 *
 * @example
 * ```ts ignore
 * const rules: OutputRules = {
 *   phases: [{ match: /loading model/, phase: "loading" }],
 *   causes: [{ match: /invalid argument/, cause: "bad-arguments" }],
 * };
 * ```
 */
export interface OutputRules {
  /** Line patterns that put a loading run in a phase, first match wins. */
  readonly phases: readonly {
    readonly match: RegExp;
    readonly phase: LoadPhase;
  }[];
  /** Line patterns that name an exit cause, first match wins. */
  readonly causes: readonly {
    readonly match: RegExp;
    readonly cause: Exclude<ExitCause, "signal" | "exit">;
  }[];
}

/**
 * One kind of inference engine, by the name a card's `engine` field uses.
 * Adding a kind is one such object in `engines/kinds.ts` (or one
 * `registerEngineKind` call).
 *
 * @example
 * ```ts ignore
 * const toy: EngineKind = {
 *   name: "toy", title: "Toy", executable: "toy-engine", install: "build it",
 *   argv: (ctx) => ["--port", String(ctx.port)],
 *   devices: () => ({ kind: "unplaced", from: "engine toy" }),
 * };
 * ```
 */
export interface EngineKind {
  /** The catalogue's name for it (`vllm`). */
  readonly name: string;
  /** Its name for people (`vLLM`). */
  readonly title: string;
  /** The executable looked up on PATH unless the card names one (`""`: the card's command names it). */
  readonly executable: string;
  /** How to install the executable, for the error when it is missing. */
  readonly install: string;
  /** The arguments after the executable, the card's `args` last. */
  argv(ctx: EngineContext): string[];
  /**
   * Chooses the file to serve from a local directory, given the names of the
   * files in it (llama.cpp wants one GGUF file).
   */
  localFile?(dir: string, files: readonly string[]): string;
  /**
   * The GPUs it takes from its card's `args` alone.
   *
   * @throws {FlagValueError} When a size or share in the args is not usable.
   */
  devices(args: readonly string[]): EngineDevices;
  /**
   * Its flag for the share of each device's memory it takes, and the share it
   * takes without it (vLLM's 0.9); absent when no share is known.
   */
  readonly memoryShare?: { readonly flag: string; readonly default?: number };
  /**
   * The flags whose product is the number of devices its weights are split
   * over (tensor-, pipeline-parallel sizes), each with its aliases, the name
   * people read first.
   */
  readonly splitFlags?: readonly (readonly string[])[];
  /**
   * True when it reads `CUDA_VISIBLE_DEVICES` entries as integers (vLLM's
   * `int()` in `device_id_to_physical_device_id`): it is handed nvidia-smi's
   * indices (under `CUDA_DEVICE_ORDER=PCI_BUS_ID`) for `GPU-<uuid>` entries.
   */
  readonly integerDevices?: boolean;
  /** How its flags are listed and spelled; absent when it has no help to ask. */
  readonly flags?: EngineFlags;
  /**
   * The flags its command line gets from the launcher (host, port, served
   * name, API key, model), every spelling: a card's `args` may not set them,
   * since the engine would take the card's, the last. Absent: none.
   */
  readonly ownedFlags?: readonly string[];
  /** Its start-up and failure lines; absent (a command card): no phase, cause `exit` or `signal`. */
  readonly output?: OutputRules;
}

/** The flags {@linkcode serveFlags} passes, which every kind using it owns. */
export const SERVE_FLAGS: readonly string[] = ["--host", "--port", "--api-key"];

/**
 * `--host`, `--port`, the served-name flag, `--api-key`, then the card's args.
 *
 * @example
 * ```ts ignore
 * serveFlags(ctx, "--alias"); // ["--host", "127.0.0.1", "--port", "5001", "--alias", "m", ...]
 * ```
 */
export function serveFlags(ctx: EngineContext, nameFlag: string): string[] {
  return [
    "--host",
    ctx.host,
    "--port",
    String(ctx.port),
    nameFlag,
    ctx.name,
    ...ctx.apiKey ? ["--api-key", ctx.apiKey] : [],
    ...ctx.card.args,
  ];
}
