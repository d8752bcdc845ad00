/**
 * Crash during load, observed N times: an engine with a share of 0.4 that
 * holds memory and exits with code 3 a second after it allocated. Each
 * restart must spawn only once `nvidia-smi` no longer lists the dead pid
 * (the start gate's rule 2). Reports the driver's release time (exit →
 * unlisted), the restart delay and the wait the gate added, as distributions.
 *
 * The check watches for itself: `/proc/<pid>` every 50 ms for the exit,
 * `nvidia-smi` back to back for the listing (a listing is dated at the start
 * of its query, an unlisting likewise).
 *
 * @module
 */
import { sleep } from "../../src/common/sleep.ts";
import { freePorts } from "../../tests/support/helpers.ts";
import type { Scenario } from "./scenario.ts";
import { distribution, RESTART_DELAY_S, seconds } from "./scenario.ts";
import { alive, expect } from "./scope.ts";

/** The restart delay the launcher runs with here (`--restart-max-delay`). */
const BACKOFF_MS = RESTART_DELAY_S * 1000;

interface Run {
  readonly pid: number;
  readonly startedAt: number;
  exitAt?: number;
  listed: boolean;
  lastListedAt?: number;
  unlistedAt?: number;
}

/** Crash during load, `settings.crashes` times. */
export const crashDuringLoad: Scenario = {
  id: "crash-during-load",
  title: "crash during load: the restart waits for the dead pid's release",
  async run(context) {
    const { world, scope, settings } = context;
    const mib = Math.min(30_000, Math.floor(0.3 * world.gpu.totalMiB));
    const cards = {
      crashy: {
        verb: "chat",
        hub: "org/crashy",
        args: {
          "gpu-memory-utilization": 0.4,
          ...world.engineArgs({ mib, crashAfterMs: 1000 }),
        },
      },
    };
    const port = freePorts(2);
    const launcher = await scope.launch(cards, ["crashy"], port);
    const runs: Run[] = [];
    const perCrashMs = world.mode === "real" ? 90_000 : 20_000;
    const deadline = performance.now() + perCrashMs * settings.crashes;
    let done = false;
    const enough = () =>
      runs.length > settings.crashes &&
      runs.slice(0, settings.crashes).every((r) => r.exitAt !== undefined);

    const watchProcesses = async () => {
      while (!done) {
        const record = await scope.record(port + 1);
        if (record && !runs.some((r) => r.pid === record.pid)) {
          runs.push({
            pid: record.pid,
            startedAt: record.startedAt,
            listed: false,
          });
        }
        for (const run of runs) {
          if (run.exitAt === undefined && !alive(run.pid)) {
            run.exitAt = Date.now();
          }
        }
        await sleep(50);
      }
    };
    const watchListing = async () => {
      while (!done) {
        const asked = Date.now();
        const listed = await world.listed();
        await sleep(50);
        if (!listed) continue;
        for (const run of runs) {
          if (listed.has(run.pid)) {
            run.listed = true;
            run.lastListedAt = asked;
          } else if (
            run.listed && run.exitAt !== undefined &&
            run.unlistedAt === undefined
          ) run.unlistedAt = asked;
        }
      }
    };
    const watchers = [watchProcesses(), watchListing()];
    try {
      while (
        !enough() && performance.now() < deadline &&
        launcher.status === undefined
      ) {
        await sleep(100);
      }
      // The last crash's dead pid: wait for its unlisting too (bounded).
      const last = runs[settings.crashes - 1];
      const end = performance.now() + 60_000;
      while (
        last?.listed && last.unlistedAt === undefined &&
        performance.now() < end
      ) await sleep(100);
    } finally {
      done = true;
      await Promise.all(watchers);
    }
    expect(
      enough(),
      `${settings.crashes} crashes, each followed by a restart, within ${
        seconds(perCrashMs * settings.crashes)
      }`,
      `${runs.filter((r) => r.exitAt !== undefined).length} exits, ${
        Math.max(0, runs.length - 1)
      } restarts${
        launcher.status !== undefined ? " (the launcher exited)" : ""
      }`,
    );
    const crashes = runs.slice(0, settings.crashes);
    const never = crashes.filter((r) => !r.listed);
    expect(
      never.length === 0,
      "nvidia-smi listing every run's pid",
      `never listed: pid ${
        never.map((r) => r.pid).join(", ")
      } (compute-app pids not visible here: rule 2 cannot see a dead run)`,
    );
    const release: number[] = [];
    const restart: number[] = [];
    const gate: number[] = [];
    for (const [k, run] of crashes.entries()) {
      const next = runs[k + 1]!;
      const exitAt = run.exitAt!;
      expect(
        next.startedAt >= run.lastListedAt!,
        `restart ${
          k + 1
        } spawned after nvidia-smi stopped listing pid ${run.pid}`,
        `spawned ${
          next.startedAt - exitAt
        } ms after the exit; the dead pid was still listed ${
          run.lastListedAt! - exitAt
        } ms after it`,
      );
      if (run.unlistedAt !== undefined) release.push(run.unlistedAt - exitAt);
      restart.push(next.startedAt - exitAt);
      gate.push(Math.max(0, next.startedAt - exitAt - BACKOFF_MS));
    }
    return {
      summary:
        `${settings.crashes} crashes, every restart after the dead pid left nvidia-smi's list; release (exit → unlisted) median ${
          distribution(release, [0.5])
        }, gate wait median ${distribution(gate, [0.5])}`,
      details: [
        `Crash during load, ${settings.crashes} crashes (engine holding ${mib} MiB, exit code 3 one second after allocating; restart delay ${BACKOFF_MS} ms; --health-interval ${settings.intervalS} s). min / median / p90 / max:`,
        "",
        "| | min / median / p90 / max |",
        "| --- | --- |",
        `| exit → nvidia-smi no longer lists the pid (release) | ${
          distribution(release)
        } |`,
        `| exit → restart spawned | ${distribution(restart)} |`,
        `| wait the gate added (beyond the ${BACKOFF_MS} ms restart delay) | ${
          distribution(gate)
        } |`,
        "",
        `Each figure is within one nvidia-smi query of the truth (the check polls back to back).`,
      ],
    };
  },
};
