/**
 * Scenarios of placement, waiting and cleanup: three shares on one GPU, a
 * foreign process holding the GPU, and the launcher SIGKILLed.
 *
 * @module
 */
import { sleep } from "../../src/common/sleep.ts";
import { freePorts } from "../../tests/support/helpers.ts";
import type { Scenario, ScenarioContext } from "./scenario.ts";
import { seconds } from "./scenario.ts";
import {
  alive,
  type CheckLauncher,
  type EngineSeen,
  expect,
  until,
} from "./scope.ts";

const LOAD_MS = 1500;

/** How long engines get to become healthy: the Python engine imports PyTorch first. */
function readyBoundMs(context: ScenarioContext, engines: number): number {
  return (context.world.mode === "real" ? 60_000 : 15_000) * engines;
}

/** Waits until every engine named is healthy; throws naming the states seen. */
export async function allHealthy(
  launcher: CheckLauncher,
  names: readonly string[],
  ms: number,
): Promise<Record<string, EngineSeen>> {
  let last: Record<string, EngineSeen> | undefined;
  const ok = await until(
    async () => {
      last = await launcher.engines();
      return last && names.every((n) => last![n]?.healthy) ? last : undefined;
    },
    ms,
    250,
  );
  expect(
    ok !== undefined,
    `${names.join(", ")} healthy within ${seconds(ms)}`,
    names.map((n) => `${n} ${last?.[n]?.state ?? "unknown"}`).join(", ") +
      (launcher.status !== undefined ? " (the launcher exited)" : ""),
  );
  return ok!;
}

/** Three shares (0.3, 0.3, 0.2) on one GPU: each sees only it, loads staged, all healthy. */
export const shares: Scenario = {
  id: "shares",
  title: "three shares (0.3, 0.3, 0.2) on one GPU",
  async run(context) {
    const { world, scope } = context;
    const fractions = [0.3, 0.3, 0.2];
    const names = fractions.map((_, i) => `share${i + 1}`);
    const held = fractions.map((f) => Math.floor(f * world.gpu.totalMiB * 0.9));
    const cards = Object.fromEntries(names.map((name, i) => [name, {
      verb: "embed",
      hub: `org/${name}`,
      args: {
        "gpu-memory-utilization": fractions[i],
        ...world.engineArgs({ mib: held[i]!, loadMs: LOAD_MS }),
      },
    }]));
    const port = freePorts(names.length + 1);
    const launcher = await scope.launch(cards, names, port);
    await allHealthy(launcher, names, readyBoundMs(context, 3));
    const records = [];
    for (let i = 0; i < names.length; i++) {
      const record = await scope.record(port + i + 1);
      expect(!!record, `a record of ${names[i]}`, "none");
      records.push(record!);
    }
    for (const [i, record] of records.entries()) {
      const visible = record.env.CUDA_VISIBLE_DEVICES;
      expect(
        visible === world.gpu.index,
        `${names[i]} given CUDA_VISIBLE_DEVICES=${world.gpu.index}`,
        `${visible}`,
      );
      if (record.devices) {
        expect(
          record.devices.count === 1 &&
            (!record.devices.uuid || record.devices.uuid === world.gpu.uuid),
          `${names[i]} sees one device, ${world.gpu.uuid}`,
          `${record.devices.count} device(s), first ${record.devices.uuid}`,
        );
      }
    }
    const gaps: number[] = [];
    for (let i = 1; i < records.length; i++) {
      const before = records[i - 1]!;
      const readyAt = before.readyAt ?? before.startedAt + LOAD_MS;
      const gap = records[i]!.startedAt - readyAt;
      expect(
        gap >= 0,
        `${names[i]} spawned after ${names[i - 1]} was ready`,
        `spawned ${-gap} ms before`,
      );
      gaps.push(gap);
    }
    const listed = await world.listed();
    const mib = records.map((r) => listed?.get(r.pid));
    for (const [i, value] of mib.entries()) {
      expect(
        value !== undefined && value >= held[i]!,
        `nvidia-smi listing ${names[i]} (pid ${
          records[i]!.pid
        }) with at least ${held[i]} MiB`,
        value === undefined ? "not listed" : `${value} MiB`,
      );
    }
    return {
      summary: `each saw only GPU ${world.gpu.index}; spawned ${
        gaps.map((g) => `${g} ms`).join(", ")
      } after the previous one was ready; listed ${
        mib.join(" / ")
      } MiB; all healthy`,
    };
  },
};

/** A foreign process holds most of the GPU: the engine waits naming it, then starts. */
export const foreignHolder: Scenario = {
  id: "foreign-holder",
  title: "a foreign process holding most of the GPU",
  async run(context) {
    const { world, scope } = context;
    const intervalMs = context.settings.intervalS * 1000;
    const holderMib = Math.floor(0.7 * world.gpu.totalMiB);
    const holder = scope.spawn(world.engineCommand({ mib: holderMib }));
    const seen = await until(
      async () => (await world.listed())?.has(holder.pid) ? true : undefined,
      world.mode === "real" ? 120_000 : 15_000,
      250,
    );
    expect(
      seen === true,
      `nvidia-smi listing the holder (pid ${holder.pid}, ${holderMib} MiB)`,
      "not listed: compute-app pids are not visible here",
    );
    const cards = {
      waiter: {
        verb: "chat",
        hub: "org/waiter",
        args: {
          "gpu-memory-utilization": 0.5,
          ...world.engineArgs({
            mib: Math.floor(0.1 * world.gpu.totalMiB),
            loadMs: 500,
          }),
        },
      },
    };
    const port = freePorts(2);
    const launcher = await scope.launch(cards, ["waiter"], port);
    let view: EngineSeen | undefined;
    const waiting = await until(
      async () => {
        view = (await launcher.engines())?.waiter;
        return view?.state === "waiting" &&
            view.waiting_for?.reason === "gpu-memory-free"
          ? view
          : undefined;
      },
      30_000,
      250,
    );
    expect(
      waiting !== undefined,
      "waiter waiting for gpu-memory-free",
      `${view?.state} (${view?.waiting_for?.reason ?? "no wait"})`,
    );
    expect(
      waiting!.waiting_for!.detail.includes(`pid ${holder.pid} `),
      `waiting_for naming the holder, pid ${holder.pid}`,
      waiting!.waiting_for!.detail,
    );
    await sleep(intervalMs + 500);
    expect(
      (await scope.record(port + 1)) === undefined,
      "no spawn while the holder holds the memory",
      "the waiter spawned",
    );
    Deno.kill(-holder.pid, "SIGKILL");
    const exitAt = Date.now();
    await holder.status;
    let unlistedAt: number | undefined;
    const spawned = await until(
      async () => {
        if (unlistedAt === undefined) {
          const asked = Date.now();
          const listed = await world.listed();
          if (listed && !listed.has(holder.pid)) unlistedAt = asked;
        }
        const record = await scope.record(port + 1);
        return unlistedAt !== undefined && record ? record : undefined;
      },
      60_000,
      100,
    );
    expect(
      spawned !== undefined,
      "the holder's memory released and the waiter spawned within 60 s",
      unlistedAt === undefined ? "the holder still listed" : "no spawn",
    );
    const late = spawned!.startedAt - unlistedAt!;
    expect(
      late <= intervalMs + 2000,
      `the waiter spawned within one interval (${
        seconds(intervalMs)
      }) and a query of the release`,
      `${late} ms after nvidia-smi stopped listing the holder`,
    );
    await allHealthy(launcher, ["waiter"], readyBoundMs(context, 1));
    return {
      summary:
        `waited (gpu-memory-free) naming pid ${holder.pid}; holder exit → unlisted ${
          seconds(unlistedAt! - exitAt)
        }; unlisted → spawn ${
          seconds(Math.max(0, late))
        } (interval ${context.settings.intervalS} s); healthy`,
    };
  },
};

/** The launcher SIGKILLed: its watchdog stops every engine; the memory comes back. */
export const launcherKilled: Scenario = {
  id: "launcher-killed",
  title: "the launcher SIGKILLed",
  async run(context) {
    const { world, scope } = context;
    const names = ["keep1", "keep2"];
    const mib = Math.floor(0.2 * world.gpu.totalMiB);
    const cards = Object.fromEntries(names.map((name, i) => [name, {
      verb: "chat",
      hub: `org/${name}`,
      args: {
        "gpu-memory-utilization": 0.3,
        ...world.engineArgs({ mib, loadMs: 300, ignoreSigterm: i === 1 }),
      },
    }]));
    const graceS = 3;
    const port = freePorts(3);
    const launcher = await scope.launch(cards, names, port, [
      "--grace",
      String(graceS),
    ]);
    await allHealthy(launcher, names, readyBoundMs(context, 2));
    const pids: number[] = [];
    for (let i = 0; i < names.length; i++) {
      pids.push((await scope.record(port + i + 1))!.pid);
    }
    const listed = await world.listed();
    expect(
      pids.every((pid) => listed?.has(pid)),
      `nvidia-smi listing both engines (pids ${pids.join(", ")})`,
      `listed: ${[...(listed?.keys() ?? [])].join(", ") || "none"}`,
    );
    launcher.child.kill("SIGKILL");
    const killedAt = Date.now();
    const goneBound = graceS * 1000 + 10_000;
    const gone = await until(
      () => pids.some(alive) ? undefined : Date.now(),
      goneBound,
      50,
    );
    expect(
      gone !== undefined,
      `every engine gone within ${
        seconds(goneBound)
      } (--grace ${graceS}, keep2 ignores SIGTERM)`,
      `still running: ${pids.filter(alive).join(", ")}`,
    );
    const memoryBound = world.releaseBoundMs;
    const zero = await until(
      async () => {
        const asked = Date.now();
        const now = await world.listed();
        return now && !pids.some((pid) => now.has(pid)) ? asked : undefined;
      },
      memoryBound,
      100,
    );
    expect(
      zero !== undefined,
      `0 MiB of ours on GPU ${world.gpu.index} within ${seconds(memoryBound)}`,
      "the engines' pids still listed",
    );
    return {
      summary: `engines gone ${
        seconds(gone! - killedAt)
      } after the SIGKILL (--grace ${graceS} s; one ignores SIGTERM); 0 MiB of ours after ${
        seconds(Math.max(0, zero! - killedAt))
      }`,
    };
  },
};
