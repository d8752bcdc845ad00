/**
 * A reload (SIGHUP, `Semioserve.reload()`): read the catalogue, the TLS pair
 * and the secret files again, validate all of it exactly as start-up does, and
 * only then apply the difference: restart the engines whose change reaches the
 * engine, amend the others, swap the TLS pair and the secrets. Any failure
 * before applying refuses the whole reload and changes nothing.
 *
 * @module
 */
import { type ModelCard, Registry } from "../catalogue.ts";
import { ConfigError } from "../common/config_error.ts";
import { secretFromFileAgain } from "../common/secret_file.ts";
import { log } from "../common/log.ts";
import { SSLConfig } from "../web.ts";
import type { OpsStance } from "../web/ops_stance.ts";
import { ServerProcess } from "../engines/server_process.ts";
import type { EngineSupervisor } from "../supervision/supervisor.ts";
import type { EngineChange } from "../supervision/supervisor_options.ts";
import type { Placement } from "../gpu/place_engines.ts";
import type { GuardedServer } from "../http/connection_guard.ts";
import type { ManagementState } from "../http/handler.ts";
import { diffCards, type ReloadDiff } from "./reload_diff.ts";
import { requestedCards } from "./requested_cards.ts";
import {
  nothingDone,
  type ReloadResult,
  reloadSummary,
} from "./reload_result.ts";
import { oneLine } from "../common/one_line.ts";
import { restartWarnings } from "./start_checks.ts";

export type { ReloadResult } from "./reload_result.ts";

/** What a reload reads again and changes: the running launcher's parts. */
export interface ReloadTarget {
  /** The catalogue path or URL, as given at start. */
  catalogue: string | URL | undefined;
  /** The model specs, as given at start. */
  models: readonly string[];
  /** The root directory (`ssl/` lives there). */
  directory: string;
  /** Each model's supervisor, in request order (a replacement takes its place). */
  supervisors: readonly EngineSupervisor[];
  /**
   * Replaces engine `index` with one for its new card: stops it (SIGTERM,
   * grace, SIGKILL) and starts the new one through the start path every start
   * takes. Rejects when the new engine cannot be prepared or spawned.
   */
  replace: (
    index: number,
    card: ModelCard,
    change: EngineChange,
  ) => Promise<void>;
  /** The placement in force at start. */
  placement: Placement;
  /** The mode and its authentication. */
  stance: OpsStance;
  /** The TLS pair in force at start, if any. */
  tls: SSLConfig | undefined;
  /** The management API's server, once it listens. */
  server: () => GuardedServer | undefined;
  /** What the management API reports; its `catalogue` is replaced. */
  state: ManagementState;
  /** Time a restarted engine gets between SIGTERM and SIGKILL. */
  graceMs: number;
  /** The `--gpus` option as given (`none` asks `nvidia-smi` nothing). */
  gpus: string | undefined;
  /** The secrets in force at start. */
  secrets: { idp: string; engineKey: string };
  /** Called after each reload, refused or not (metrics). */
  onReloaded?: (result: ReloadResult) => void;
}

/** Everything a reload read and validated, before anything changes. */
interface Plan {
  names: string[];
  cards: ModelCard[];
  diff: ReloadDiff;
  placement: Placement;
  tls: SSLConfig | undefined;
  secret: string | undefined;
  engineKey: string | undefined;
  warnings: string[];
}

/**
 * Applies reloads to a running launcher, one at a time (the caller
 * serializes them), remembering what is in force between them.
 *
 * @example
 * ```ts ignore
 * const reloader = new Reloader(target);
 * const result = await reloader.reload();
 * ```
 */
export class Reloader {
  readonly #t: ReloadTarget;
  #placement: Placement;
  #tls: SSLConfig | undefined;
  #secret: string;
  #engineKey: string;

  /** @param target The launcher's parts. */
  constructor(target: ReloadTarget) {
    this.#t = target;
    this.#placement = target.placement;
    this.#tls = target.tls;
    this.#secret = target.secrets.idp;
    this.#engineKey = target.secrets.engineKey;
  }

  /**
   * Reads, validates, then applies; logs one summary line.
   *
   * @returns What the reload did, or why it was refused.
   */
  async reload(): Promise<ReloadResult> {
    const began = performance.now();
    const empty = nothingDone();
    let result: Omit<ReloadResult, "summary" | "ms">;
    try {
      const plan = await this.#validate();
      for (const warning of plan.warnings) log.warn(warning);
      result = await this.#apply(plan);
    } catch (error) {
      result = { ok: false, error: oneLine(error), ...empty };
    }
    const summary = reloadSummary(result);
    (result.ok ? log.info : log.warn)(summary);
    const done = { ...result, summary, ms: performance.now() - began };
    this.#t.onReloaded?.(done);
    return done;
  }

  /** Everything start-up checks, in its order; throws its one-line errors. */
  async #validate(): Promise<Plan> {
    const t = this.#t;
    const registry = await Registry.load(t.catalogue);
    // The environment is the one start-up read: a process's own does not change.
    const cards = requestedCards(registry, t.models, "reload");
    const diff = diffCards(t.supervisors.map((s) => s.card), cards);
    const changed = new Set(diff.restart);
    const placement = this.#placement.replan(cards, changed);
    const engineKey = secretFromFileAgain("LOCAL_ENGINE_API_KEY");
    t.supervisors.forEach((s, i) => {
      const card = cards[i]!;
      if (!changed.has(card.name)) return;
      // The new command line, resolved as start-up resolves it (executable, weights).
      new ServerProcess(card, {
        host: s.host,
        port: s.port,
        directory: t.directory,
        env: placement.env(card),
        log: s.log,
        apiKey: engineKey ?? this.#engineKey,
      });
    });
    // The warnings a start gives, for the engines this reload restarts.
    const restarting = cards.filter((card) => changed.has(card.name));
    const warnings = await restartWarnings(
      restarting,
      t.directory,
      t.gpus,
      placement,
    );
    const tls = await SSLConfig.fromDirectory(t.directory, {
      devMode: t.stance.devMode,
    });
    if ((tls === undefined) !== (this.#tls === undefined)) {
      const ssl = `${t.directory}/ssl/server.crt and server.key`;
      throw new ConfigError(
        this.#tls
          ? `Cannot reload TLS: ${ssl} are gone (expected the pair; serving plain HTTP instead takes a restart)`
          : `Cannot reload TLS: ${ssl} appeared (serving HTTPS instead of plain HTTP takes a restart)`,
      );
    }
    return {
      names: registry.names(),
      cards,
      diff,
      placement,
      tls,
      secret: secretFromFileAgain("IDP_SECRET"),
      engineKey,
      warnings,
    };
  }

  async #apply(plan: Plan): Promise<Omit<ReloadResult, "summary" | "ms">> {
    const t = this.#t;
    let tlsSerial: string | undefined;
    const tls = plan.tls;
    if (
      tls && this.#tls &&
      (tls.cert !== this.#tls.cert || tls.key !== this.#tls.key)
    ) {
      // First: the one step that can still be refused, before anything changed.
      t.server()?.replaceTls({ cert: tls.cert, key: tls.key });
      this.#tls = tls;
      tlsSerial = tls.serial;
    }
    const secrets: string[] = [];
    if (
      plan.secret !== undefined && plan.secret !== this.#secret &&
      !t.stance.devMode
    ) {
      t.stance.auth.rotateSecret(plan.secret);
      this.#secret = plan.secret;
      secrets.push("IDP_SECRET");
    }
    const newKey = plan.engineKey !== undefined &&
        plan.engineKey !== this.#engineKey
      ? plan.engineKey
      : undefined;
    if (newKey !== undefined) {
      this.#engineKey = newKey;
      secrets.push("LOCAL_ENGINE_API_KEY");
    }
    const before = new Set(t.state.catalogue);
    const after = new Set(plan.names);
    t.state.catalogue = plan.names;
    this.#placement = plan.placement;
    const restarted = new Set(plan.diff.restart);
    const amended = new Set(plan.diff.amend);
    const failed: { name: string; error: string }[] = [];
    const key = newKey === undefined ? {} : { apiKey: newKey };
    await Promise.all(t.supervisors.map(async (s, i) => {
      const card = plan.cards[i]!;
      if (!restarted.has(card.name)) {
        if (amended.has(card.name) || newKey !== undefined) s.amend(card, key);
        return;
      }
      try {
        await t.replace(i, card, {
          env: plan.placement.env(card),
          gpus: plan.placement.devices(card),
          // The key in force: a replacement starts with what its predecessor had.
          apiKey: this.#engineKey,
        });
      } catch (error) {
        failed.push({ name: card.name, error: oneLine(error) });
      }
    }));
    return {
      ok: true,
      restarted: plan.diff.restart,
      changed: plan.diff.amend,
      unchanged: plan.diff.same,
      failed,
      catalogue: {
        added: plan.names.filter((name) => !before.has(name)),
        removed: [...before].filter((name) => !after.has(name)).sort(),
      },
      ...(tlsSerial === undefined ? {} : { tlsSerial }),
      secrets,
      warnings: plan.warnings,
    };
  }
}
