/**
 * What a running launcher records of itself: the metrics file, rewritten on
 * every engine change and health round; each reload, counted and journaled.
 *
 * @module
 */
import type { EngineRun } from "../supervision/engine_run.ts";
import type { Journal } from "../supervision/journal.ts";
import { MetricsWriter } from "../metrics/file.ts";
import { metricsSnapshot } from "../metrics/snapshot.ts";
import type { ReloadMetrics } from "../metrics/text.ts";
import type { ReloadResult } from "./diff.ts";

type LauncherFacts = Parameters<typeof metricsSnapshot>[0];

export class LauncherRecord {
  readonly #metrics: MetricsWriter;
  readonly #facts: LauncherFacts;
  readonly #reloads: ReloadMetrics = { ok: 0, refused: 0 };
  readonly #engines: readonly EngineRun[];
  readonly #journal: Journal;

  constructor(
    launcher: Omit<LauncherFacts, "reloads"> & { directory: string },
    engines: readonly EngineRun[],
    journal: Journal,
  ) {
    const { directory, ...facts } = launcher;
    this.#metrics = new MetricsWriter(directory, facts.port);
    this.#facts = { ...facts, reloads: this.#reloads };
    this.#engines = engines;
    this.#journal = journal;
  }

  write(): void {
    this.#metrics.update(metricsSnapshot(this.#facts, this.#engines));
  }

  /** A reload ended, applied or refused: journaled and counted. */
  reloaded(result: ReloadResult): void {
    this.#journal.record({
      model: null,
      event: "reload",
      reason: result.ok ? "applied" : "refused",
      detail: result.summary,
    });
    if (result.ok) {
      this.#reloads.ok++;
      this.#reloads.lastOkSeconds = Date.now() / 1000;
    } else this.#reloads.refused++;
    this.write();
  }

  /** Removes the metrics file. */
  async close(): Promise<void> {
    await this.#metrics.close();
  }
}
