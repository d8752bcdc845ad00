// An engine kind knows everything engine-specific; other folders ask it
// instead of comparing engine names. Kinds are pure.
import type { ModelCard } from "../../catalogue.ts";
import type { Footprint } from "../footprint.ts";
import { flagValue } from "./flag_values.ts";

export interface EngineContext {
  /** A local path or the hub id. */
  readonly model: string;
  readonly isLocal: boolean;
  readonly host: string;
  readonly port: number;
  readonly apiKey: string;
  readonly card: ModelCard;
}

/** `unplaced`: the launcher leaves the engine's environment alone. `from` is for people. */
export type EngineDevices =
  | { readonly kind: "unplaced"; readonly from: string }
  | { readonly kind: "whole"; readonly count: number; readonly from: string }
  | { readonly kind: "share"; readonly share: number; readonly from: string };

export interface EngineFlags {
  readonly helpArgv: readonly string[];
  parseHelp(text: string): string[];
  /** `_` read as `-` in long flags (vLLM). */
  readonly underscores?: boolean;
  /** An unambiguous start of a long flag is taken (argparse's default). */
  readonly prefixes?: boolean;
}

/** Where a loading engine is: fetching weights, reading them, or the rest (compiling, profiling, the KV cache, graphs). */
export type LoadPhase = "downloading" | "loading" | "preparing";

/** Why an engine run ended: a rule's cause from its output, else `signal`, else `exit`. */
export type ExitCause =
  | "gpu-out-of-memory"
  | "gpu-memory-profiling"
  | "port-in-use"
  | "bad-arguments"
  | "model-not-found"
  | "stalled"
  | "wake-failed"
  | "signal"
  | "exit";

// In the order the metrics list them.
export const EXIT_CAUSES: readonly ExitCause[] = [
  "gpu-out-of-memory",
  "gpu-memory-profiling",
  "port-in-use",
  "bad-arguments",
  "model-not-found",
  "stalled",
  "wake-failed",
  "signal",
  "exit",
];

/**
 * A phase rule's two captures, when present, are shards done and total; the
 * first line matching a cause rule decides the exit cause. First match wins.
 */
export interface OutputRules {
  readonly phases: readonly { match: RegExp; phase: LoadPhase }[];
  readonly causes: readonly {
    readonly match: RegExp;
    readonly cause: Exclude<ExitCause, "signal" | "exit" | "stalled">;
  }[];
  /** Its lines saying it sleeps and wakes (`supervision/sleep_watch.ts`); an `asleep` rule's captures, where present, are the GiB it freed and keeps, as the engine counts them. */
  readonly sleep?: Readonly<Partial<Record<SleepLine, RegExp>>>;
  /** Lines naming what the load took, anchored at the engine's log prefix: tried on each line while it loads (`footprint_lines.ts`). */
  readonly memory?: readonly MemoryRule[];
  /** Besides spawn to first 200: a line that starts a load again (llama.cpp's wake), and one that ends a load (later lines may be requests). */
  readonly load?: { readonly opens: RegExp; readonly closes: RegExp };
}

/**
 * A tag for one logger's rules: the template (raw) matched right after
 * `prefix` (the logger's), never inside a line (a request's text).
 *
 * @example
 * ```ts
 * const logged = atPrefix(String.raw`\[\d+\] `);
 * logged`took (\S+) GiB`.exec("[1] took 2 GiB")?.[1]; // "2"
 * ```
 */
export function atPrefix(
  prefix: string,
): (template: TemplateStringsArray) => RegExp {
  return (template) => new RegExp(`^${prefix}${template.raw.join("")}`);
}

/** Gave its memory back; a request woke it; the wake's reload is over; the reload failed (it aborts). */
export type SleepLine = "asleep" | "waking" | "awake" | "failed";

/**
 * How a card's `sleep_after` reaches the engine: its own flag (idle seconds:
 * it sleeps and wakes itself), routes the launcher drives (it sleeps when the
 * launcher says, parks what comes meanwhile, wakes when the launcher says), or
 * why it cannot.
 */
export type SleepRule =
  | { flag: string }
  | { launcher: LauncherSleep }
  | { refused: string };

/** An engine the launcher puts to sleep and wakes (vLLM's development routes). */
export interface LauncherSleep {
  /** What turns the routes and the parked-request count on. */
  readonly args: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  /** `POST`: fall asleep; `wait` is added where the build takes it (what is in flight ends first). */
  readonly sleep: string;
  readonly wait: string;
  /** `POST`: wake. */
  readonly wake: string;
  /** `GET`: whether it sleeps, a route as guarded as the others (JSON `is_sleeping`). */
  readonly asleep: string;
  /** `GET`: requests its API server holds, parked ones included: JSON `field`. */
  readonly load: { readonly path: string; readonly field: string };
  /** The first version that parks requests while asleep (`GET /version`): an older one is never put to sleep. */
  readonly parksSince: string;
  /** MiB one keeps asleep before its first sleep measured it. */
  readonly residueMiB: number;
  readonly residueFrom: string;
}

/** A part of a run's memory a line fills: MiB, or tokens for `kv_tokens`. */
export type MemoryPart =
  | "weights"
  | "kv_cache"
  | "kv_tokens"
  | "graphs"
  | "compute";

/**
 * Its numeric captures are summed (K + V), in `unit`; lines adding to a part
 * sum (devices, buffers, TP ranks), `kv_tokens` keeps the largest. A capture
 * named `device`, always the first, names where it lives (`CPU_Mapped` counts
 * as `CPU`).
 */
export interface MemoryRule {
  readonly match: RegExp;
  readonly part: MemoryPart;
  readonly unit?: "MiB" | "GiB";
  /** Its line starts a load: other parts before it were a trial's (llama.cpp's `--fit` dry runs, printed at `-v`). */
  readonly anew?: boolean;
}

export function inGiB(part: MemoryPart, match: RegExp): MemoryRule {
  return { match, part, unit: "GiB" };
}

/** A path answering the Prometheus text format, and the samples read there. */
export interface TrafficRule {
  readonly path: string;
  readonly running: string;
  readonly waiting: string;
  readonly promptTokens: string;
  readonly generatedTokens: string;
  /**
   * Where the token counters move only when a request (or a prefill) ends: a
   * counter moving at every engine step, prefill included. It is progress for
   * the stall and canary rules, and tokens/s is read from it: from its label
   * set `tokens` (`x{mode="decode"}`), or from it times the gauge `perStep`
   * (requests served per step).
   */
  readonly steps?: {
    readonly counter: string;
    readonly tokens?: string;
    readonly perStep?: string;
    /** The significant digits it prints them with (llama.cpp: 6): past them the values are rounded. */
    readonly digits?: number;
    /** A step may be a whole prefill batch: its tokens (the card's `flags`, else `tokens`) at the prompt rate (`seconds`: time spent on the prompt counter's tokens). */
    readonly batch?: {
      readonly flags: readonly string[];
      readonly tokens: number;
      readonly seconds: string;
    };
  };
  /** The flag the launcher adds to turn the endpoint on, unless the card's args give it. */
  readonly enableFlag?: string;
  /** A flag that makes the engine sleep when idle: no canary then (it would keep it awake). */
  readonly sleepFlag?: string;
  /** Where it says whether it sleeps (JSON `is_sleeping`), only when its environment sets `env` to 1. */
  readonly asleep?: { readonly path: string; readonly env?: string };
  /** Its own view of each request: a drain waits for those in flight at its start, not for the gauges' 0 (arrivals keep them up). */
  readonly requests?: RequestView;
}

/** A JSON path answering the ids of the requests it is processing; `processing` null on another shape. */
export interface RequestView {
  readonly path: string;
  processing(json: unknown): number[] | null;
}

/** Adding a kind is one such object in `engines/kinds.ts` (or one `registerEngineKind` call). */
export interface EngineKind {
  /** `vllm` in the catalogue, `vLLM` for people. */
  readonly name: string;
  readonly title: string;
  /** `""`: the card's command names it. */
  readonly executable: string;
  /** For the error when the executable is missing. */
  readonly install: string;
  argv(ctx: EngineContext): string[];
  /** llama.cpp wants one GGUF file of a local directory. */
  localFile?(dir: string, files: readonly string[]): string;
  /** @throws {FlagValueError} When a size or share in the args is not usable. */
  devices(args: readonly string[]): EngineDevices;
  /** It reads `CUDA_VISIBLE_DEVICES` as integers: it is handed nvidia-smi's indices for `GPU-<uuid>` entries. */
  readonly integerDevices?: boolean;
  readonly flags?: EngineFlags;
  /** Every spelling of the flags the launcher sets besides {@linkcode SERVE_FLAGS}: the engine would take a card's, the last. */
  readonly ownedFlags?: readonly string[];
  readonly output?: OutputRules;
  /** It reads `--api-key` as a list of keys: a key holding `separator`, or opening with `quote`, is not the one the launcher sends. */
  readonly apiKeyList?: { readonly separator: string; readonly quote: string };
  /** Absent: no traffic is read (a command card may name its own, `metrics`). */
  readonly traffic?: TrafficRule;
  /** Past SIGTERM, a second one this long after: the engine may never exit on the first alone. */
  readonly termAgainMs?: number;
  /** Its compile caches: each variable, unless the card's `env` or the launcher's environment sets it, is `<root>/data/cache/<card>/<dir>`. */
  readonly caches?: Readonly<Record<string, string>>;
  /** SIGTERM is its own drain (arrivals refused, what is in flight finished, then exit) when the args set `flag` above 0; `since`: its first version. */
  readonly termDrain?: { readonly flag: string; readonly since: string };
  readonly sizing?: MemorySizing;
  /** Absent: a card's `sleep_after` is refused (no request can wake it). */
  readonly sleep?: SleepRule;
}

/** What one engine takes on each of its devices before it serves. */
export interface MemoryNeed {
  /** Of each device's total memory. */
  readonly fraction: number;
  /** MiB, where known (its budget or its footprint): wins over `fraction`. */
  readonly mib?: number;
  /** Where it comes from, e.g. `gpu-memory-utilization 0.9 (vLLM's default)`. */
  readonly from: string;
}

/** What sizes an engine's memory, and how a card's `gpu_memory` reaches it. */
export interface MemorySizing {
  /** The flags that change what it takes, aliases space-separated: with the model, the footprint book's key. */
  readonly flags: readonly string[];
  /** Its own knobs for it: a card sets them or `gpu_memory`, not both. */
  readonly knobs: readonly string[];
  /** Its flag for the share of each device's memory it takes, and the share without it (vLLM's 0.9). */
  readonly share?: { readonly flag: string; readonly default?: number };
  /** The flags whose product is the number of devices its weights are split over, each with its aliases. */
  readonly split?: readonly (readonly string[])[];
  /** It sizes nothing from the memory free at its start: its footprint is what it takes, placement packs it by that. */
  readonly packs?: boolean;
  /** The args holding it to a budget on one device, or why it cannot be held (MiB). */
  budget(given: BudgetFacts): string[] | string;
}

/** A budget on its device: `spareMiB`, what stays free there once each engine placed there holds its own. */
export interface BudgetFacts {
  readonly budgetMiB: number;
  readonly totalMiB: number;
  readonly spareMiB: number;
  /** Its last footprint on such a device, if any. */
  readonly measured?: Footprint | undefined;
}

/** `budget ÷ total`, rounded down to 4 places: a fraction never above the budget. */
export function fractionOf({ budgetMiB, totalMiB }: BudgetFacts): string {
  return String(Math.floor((budgetMiB / totalMiB) * 1e4) / 1e4);
}

/**
 * Whether SIGTERM drains an engine of `kind` started with `args`.
 *
 * @example `termDrains(VLLM, ["--shutdown-timeout", "30"])` is true.
 */
export function termDrains(kind: EngineKind, args: readonly string[]): boolean {
  const flag = kind.termDrain?.flag;
  return flag !== undefined && Number(flagValue(args, [flag])?.value) > 0;
}

export const SERVE_FLAGS: readonly string[] = ["--host", "--port", "--api-key"];

/** `enable` (the metrics flag) unless the card's args give it; the card's args last. */
export function serveFlags(
  ctx: EngineContext,
  nameFlag: string,
  enable?: string,
): string[] {
  const { host, port, apiKey, card } = ctx;
  const given = enable === undefined ||
    card.args.some((a) => a === enable || a.startsWith(`${enable}=`));
  return [
    ...["--host", host, "--port", String(port), nameFlag, card.name],
    ...apiKey ? ["--api-key", apiKey] : [],
    ...given ? [] : [enable],
    ...card.args,
  ];
}

/** The flags of each help line's invocation (`-c, --ctx-size N`). */
export function helpFlags(
  text: string,
  invocation: (line: string) => string | undefined,
  comma: string | RegExp,
): string[] {
  return text.split("\n").flatMap((line) =>
    (invocation(line)?.split(comma) ?? []).map((part) => part.split(" ")[0]!)
      .filter((flag) => /^--?[A-Za-z0-9][\w.-]*$/.test(flag))
  );
}
