/**
 * The launcher's value defaults, in a module of their own that reads nothing
 * from the environment, so a program can take them without the launcher's
 * settings (the bench's bare server does).
 *
 * @module
 */
import {
  DEFAULT_LOG_KEEP,
  DEFAULT_LOG_MAX_BYTES,
} from "../engines/log_sink.ts";

/**
 * Every default of `SemioserveOptions` that is a value (not read
 * from the environment), in the options' units: the one place they are
 * written (the log sizes are `EngineLog`'s own). The launcher reads them
 * through `resolveOptions`, the command line's `--help` prints
 * them, and a test holds the `@default` tags to them.
 */
export const SEMIOSERVE_DEFAULTS = {
  graceMs: 10_000,
  pollTimeoutMs: 2_000,
  restart: "on-failure",
  restartMaxDelayMs: 300_000,
  stableAfterMs: 600_000,
  healthIntervalMs: 10_000,
  livenessFailures: 6,
  logMaxBytes: DEFAULT_LOG_MAX_BYTES,
  logKeep: DEFAULT_LOG_KEEP,
  gpuReleaseTimeoutMs: 30_000,
  startTimeoutMs: 900_000,
  headerTimeoutMs: 10_000,
  idleTimeoutMs: 120_000,
  maxConnections: 1024,
  handleSignals: true,
} as const;
