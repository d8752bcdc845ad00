/**
 * What a model does: the kind of request it answers.
 *
 * @example
 * ```ts
 * import { Verb } from "@mymodel/serve/catalogue";
 * console.log(Verb.CHAT); // "chat"
 * ```
 */
export const Verb = {
  CHAT: "chat",
  COMPLETE: "complete",
  EMBED: "embed",
  RERANK: "rerank",
  CLASSIFY: "classify",
  TRANSCRIBE: "transcribe",
} as const;
/** One of the {@linkcode Verb} values. */
export type Verb = typeof Verb[keyof typeof Verb];

/**
 * What kind of input a model takes.
 *
 * @example
 * ```ts
 * import { Modality } from "@mymodel/serve/catalogue";
 * console.log(Modality.IMAGE); // "image"
 * ```
 */
export const Modality = {
  TEXT: "text",
  IMAGE: "image",
  AUDIO: "audio",
  VIDEO: "video",
} as const;
/** One of the {@linkcode Modality} values. */
export type Modality = typeof Modality[keyof typeof Modality];

/** One model of the catalogue, validated and normalized. Cards are frozen. */
export interface ModelCard {
  /** The catalogue name; safe as a file name (`^[A-Za-z0-9][A-Za-z0-9._-]*$`). */
  readonly name: string;
  /** What the model does. */
  readonly verb: Verb;
  /** The inputs the model takes, never empty. @default {["text"]} */
  readonly modality: readonly Modality[];
  /** The hub identifier (for llama.cpp: `<user>/<repo>[:quant]`), if the card names one. */
  readonly hub?: string;
  /** Where the weights live, relative to `<directory>/models`. @default {name} */
  readonly local: string;
  /** The engine kind that serves the model. @default {"vllm"} */
  readonly engine: string;
  /** An explicit engine executable, overriding the engine's default. */
  readonly executable?: string;
  /** The argv template of an `engine: command` card (placeholders like `{model}`, `{port}`). */
  readonly command?: readonly string[];
  /** Extra engine arguments, as argv. */
  readonly args: readonly string[];
  /** Extra environment variables for the engine. */
  readonly env: Readonly<Record<string, string>>;
  /** Free text for people. */
  readonly description?: string;
  /** When the engine is started again; unset: the launcher's `--restart`. */
  readonly restart?: RestartPolicy;
  /** Seconds before a `failed` engine is tried again (`failed_retry`; 0: never); unset: the launcher's `--failed-retry`. */
  readonly failedRetry?: number;
  /** n ≥ 1 whole GPUs, a share of one (0 < x < 1), or 0; unset: from the engine's settings. */
  readonly gpus?: number;
  /** GPU memory it may take on each of its devices, in bytes (`gpu_memory: 24GiB`): placement sums it, its engine's own knob is set from it. */
  readonly gpuMemory?: number;
  /** Seconds a planned stop waits for its requests in flight (`drain_timeout`); unset: the launcher's `--drain-timeout`. */
  readonly drainTimeout?: number;
  /** Only `engine: command`: where its traffic is counted (the other kinds name their own). */
  readonly metrics?: CardMetrics;
  /** Seconds with requests running and no counter moving (tokens, or the kind's per-step counter) before the engine is stalled (`0`: never); unset: the launcher's `--stall-timeout`. */
  readonly stallTimeout?: number;
  /** `false`: no canary request to the idle engine. @default {true} */
  readonly canary?: boolean;
  /** `false`: its local weights are not read ahead while it waits (`read_ahead`). @default {true} */
  readonly readAhead?: boolean;
  /** Idle seconds before the engine gives its memory back, through its kind's own sleep (`sleep_after`; 0: never). */
  readonly sleepAfter?: number;
  /** `true`: never put to sleep to make room for another engine (`pin`). @default {false} */
  readonly pin?: boolean;
  /** Lower is put to sleep first to make room for another engine (`priority`). @default {0} */
  readonly priority?: number;
}

/**
 * An `engine: command` card's Prometheus endpoint and the sample names the
 * launcher reads there (each summed over its label sets).
 *
 * @example
 * ```ts
 * import type { CardMetrics } from "@mymodel/serve/catalogue";
 * const metrics: CardMetrics = {
 *   path: "/metrics",
 *   running: "my:running",
 *   waiting: "my:waiting",
 *   promptTokens: "my:prompt_tokens_total",
 *   generatedTokens: "my:generated_tokens_total",
 * };
 * console.log(metrics.path);
 * ```
 */
export interface CardMetrics {
  /** The endpoint's path. @default {"/metrics"} */
  readonly path: string;
  /** A gauge of requests being computed. */
  readonly running: string;
  /** A gauge of queued requests. */
  readonly waiting: string;
  /** A counter of prompt tokens. */
  readonly promptTokens: string;
  /** A counter of generated tokens. */
  readonly generatedTokens: string;
}

/**
 * When a stopped engine is started again: `on-failure` after a non-zero exit,
 * a signal or a failed liveness check; `always` also after exit 0; `never`.
 *
 * @example
 * ```ts
 * import type { RestartPolicy } from "@mymodel/serve/catalogue";
 * const policy: RestartPolicy = "on-failure";
 * console.log(policy);
 * ```
 */
export type RestartPolicy = "on-failure" | "always" | "never";

/** Every {@linkcode RestartPolicy}, in the help text's order. */
export const RESTART_POLICIES = ["on-failure", "always", "never"] as const;

/** Plain data, so the catalogue need not import `engines/kinds.ts` (whose `registerEngineKind` adds a name here). */
export const ENGINE_NAMES: string[] = [
  "vllm",
  "llama.cpp",
  "sglang",
  "command",
];
