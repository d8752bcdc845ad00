/**
 * The shape of a known-flag list (`known_flags_vllm.ts`,
 * `known_flags_sglang.ts`): data the unknown-flag warning reads.
 *
 * @module
 */

/**
 * The flags one engine takes, as its `--help` lists them (`--max-model-len`,
 * `-tp`), and where the list comes from.
 *
 * @example
 * ```ts ignore
 * const flags: KnownFlags = { engine: "vllm", source: "vllm serve --help=all (vLLM 0.11.0)", flags: ["--max-model-len"] };
 * ```
 */
export interface KnownFlags {
  /** The catalogue's engine name. */
  readonly engine: string;
  /** Where the list was read, with the version or commit. */
  readonly source: string;
  /** Every flag, dashes included. */
  readonly flags: readonly string[];
}
