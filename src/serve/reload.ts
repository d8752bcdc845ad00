/**
 * A reload (SIGHUP, `Semioserve.reload()`): a new plan, computed by the same
 * function as a start's (`planStart`) against the running one, so the
 * catalogue, the TLS pair and the secret files are read again and validated
 * exactly as start-up does; only then is the difference applied: restart the
 * engines whose change reaches the engine, amend the others, swap the TLS
 * pair and the secrets. Any failure before applying refuses the whole reload
 * and changes nothing.
 *
 * @module
 */
import { ConfigError } from "../common/config_error.ts";
import { log } from "../common/log.ts";
import { type EnginePlan, planEngine } from "../engines/engine_plan.ts";
import type { EngineRun } from "../supervision/engine_run.ts";
import type { GuardedServer } from "../http/connection_guard.ts";
import type { ManagementState } from "../http/handler.ts";
import {
  refusedReload,
  type ReloadResult,
  reloadSummary,
} from "./reload_result.ts";
import { oneLine } from "../common/one_line.ts";
import type { Plan } from "./start_checks.ts";

/** What a reload reads again and changes: the running launcher's parts. */
export interface ReloadTarget {
  /** The plan the launcher started with. */
  plan: Plan;
  /** A new plan against the running one (`planStart` in `reload` mode). */
  replan: (running: Plan) => Promise<Plan>;
  /** Each model's supervisor, in request order (a replacement takes its place). */
  supervisors: readonly EngineRun[];
  /** Replaces engine `index` with one for its new plan (`replaceEngine`). */
  replace: (index: number, plan: EnginePlan) => Promise<void>;
  /** The management API's server, once it listens. */
  server: () => GuardedServer | undefined;
  /** What the management API reports; its `catalogue` is replaced. */
  state: ManagementState;
  /** Called after each reload, refused or not (metrics). */
  onReloaded?: (result: ReloadResult) => void;
}

/**
 * Applies reloads to a running launcher, one at a time (the caller
 * serializes them), remembering the plan in force between them.
 */
export class Reloader {
  readonly #t: ReloadTarget;
  #plan: Plan;

  constructor(target: ReloadTarget) {
    this.#t = target;
    this.#plan = target.plan;
  }

  /** Plans, then applies the difference; logs one summary line. */
  async reload(): Promise<ReloadResult> {
    const began = performance.now();
    let done: ReloadResult;
    try {
      const plan = await this.#replan();
      for (const warning of plan.warnings) log.warn(warning);
      const result = await this.#apply(plan);
      const summary = reloadSummary(result);
      done = { ...result, summary, ms: performance.now() - began };
    } catch (error) {
      done = refusedReload(oneLine(error), performance.now() - began);
    }
    (done.ok ? log.info : log.warn)(done.summary);
    this.#t.onReloaded?.(done);
    return done;
  }

  /** The running plan, its engines as they run now. */
  #running(): Plan {
    return { ...this.#plan, engines: this.#t.supervisors.map((s) => s.plan) };
  }

  /** The new plan; refused when TLS would switch on or off. */
  async #replan(): Promise<Plan> {
    const plan = await this.#t.replan(this.#running());
    const was = this.#plan.tls;
    if ((plan.tls === undefined) !== (was === undefined)) {
      const ssl = `${plan.directory}/ssl/server.crt and server.key`;
      throw new ConfigError(
        was
          ? `Cannot reload TLS: ${ssl} are gone (expected the pair; serving plain HTTP instead takes a restart)`
          : `Cannot reload TLS: ${ssl} appeared (serving HTTPS instead of plain HTTP takes a restart)`,
      );
    }
    return plan;
  }

  /** Applies the difference between the running plan and `next`. */
  async #apply(next: Plan): Promise<Omit<ReloadResult, "summary" | "ms">> {
    const t = this.#t;
    const was = this.#plan;
    const diff = next.changes!;
    let tlsSerial: string | undefined;
    const tls = next.tls;
    if (
      tls && was.tls &&
      (tls.cert !== was.tls.cert || tls.key !== was.tls.key)
    ) {
      // First: the one step that can still be refused, before anything changed.
      t.server()?.replaceTls({ cert: tls.cert, key: tls.key });
      tlsSerial = tls.serial;
    } else if (tls) next = { ...next, tls: was.tls };
    const secrets: string[] = [];
    if (next.idpSecret !== was.idpSecret && !was.stance.devMode) {
      was.stance.auth.rotateSecret(next.idpSecret);
      secrets.push("IDP_SECRET");
    }
    const newKey = next.engineKey !== was.engineKey;
    if (newKey) secrets.push("LOCAL_ENGINE_API_KEY");
    const before = new Set(t.state.catalogue);
    const after = new Set(next.catalogue);
    t.state.catalogue = next.catalogue;
    this.#plan = next;
    // A failed engine is retried whether its card changed or not: the fix
    // may be a file under models/, so its command line is resolved anew.
    const retried = t.supervisors.filter((s) =>
      s.state === "failed" && !diff.restart.includes(s.name)
    ).map((s) => s.name);
    const restarted = new Set([...diff.restart, ...retried]);
    const amended = new Set(diff.amend);
    const failed: { name: string; error: string }[] = [];
    const key = newKey ? { apiKey: next.engineKey } : {};
    await Promise.all(t.supervisors.map(async (s, i) => {
      const engine = next.engines[i]!;
      if (!restarted.has(engine.name)) {
        if (amended.has(engine.name) || newKey) s.amend(engine.card, key);
        return;
      }
      try {
        await t.replace(
          i,
          retried.includes(engine.name)
            ? planEngine(engine.card, { ...engine, ...key })
            : engine,
        );
      } catch (error) {
        failed.push({ name: engine.name, error: oneLine(error) });
      }
    }));
    return {
      ok: true,
      restarted: [...restarted],
      changed: diff.amend.filter((name) => !retried.includes(name)),
      unchanged: diff.same.filter((name) => !retried.includes(name)),
      failed,
      catalogue: {
        added: next.catalogue.filter((name) => !before.has(name)),
        removed: [...before].filter((name) => !after.has(name)).sort(),
      },
      ...(tlsSerial === undefined ? {} : { tlsSerial }),
      secrets,
      warnings: [...next.warnings],
    };
  }
}
