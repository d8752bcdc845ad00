/**
 * Scenarios of GPU facts that must hold in a container and on a GPU in
 * trouble (issue 30): neighbours restarting where `nvidia-smi` lists host
 * pids, a device reporting its memory as an error, device ids vLLM can read,
 * and a quiet device while a neighbour loads.
 *
 * @module
 */
import type { Scenario } from "./scenario.ts";
import { seconds } from "./scenario.ts";
import { type EngineSeen, expect, until } from "./scope.ts";
import { freePorts } from "../../tests/support/helpers.ts";

/** A share of the checked GPU (vLLM-like stand-in), with this behaviour. */
function share(name: string, args: Record<string, number | boolean>) {
  return {
    verb: "chat",
    hub: `org/${name}`,
    args: { "gpu-memory-utilization": 0.3, ...args },
  };
}

/** Two neighbours on one GPU crash and restart; pids listed are the host's in a container. */
export const containerRelease: Scenario = {
  id: "container-release",
  title:
    "a container's nvidia-smi (host pids): neighbours' restarts wait for the memory, not the release timeout",
  async run({ world, scope }) {
    await world.stage?.({ hostPids: true });
    const mib = Math.floor(0.05 * world.gpu.totalMiB);
    const cards = {
      first: share("first", world.engineArgs({ mib, crashAfterMs: 1500 })),
      second: share("second", world.engineArgs({ mib, crashAfterMs: 2500 })),
    };
    const port = freePorts(3);
    const launcher = await scope.launch(cards, ["first", "second"], port);
    const waits: number[] = [];
    for (const i of [1, 2]) {
      const run = await until(() => scope.record(port + i), 60_000, 100);
      expect(run !== undefined, `engine ${i} started`, "never started");
      const next = await until(
        async () => {
          const r = await scope.record(port + i);
          return r && r.pid !== run!.pid ? r : undefined;
        },
        60_000,
        100,
      );
      expect(next !== undefined, `engine ${i} restarted`, "never restarted");
      waits.push(next!.startedAt - run!.startedAt - (i === 1 ? 1500 : 2500));
    }
    const late = launcher.lines.filter((l) => /starting anyway/.test(l));
    expect(
      late.length === 0 && waits.every((ms) => ms < 20_000),
      "both restarts well within --gpu-release-timeout (30 s), no warning",
      `restarts ${waits.map(seconds).join(", ")} after the crash; ${
        late.join(" ") || "no warning"
      }`,
    );
    return {
      summary: `restarts ${
        waits.map(seconds).join(" and ")
      } after each crash (pids listed: ${
        world.mode === "stand-in"
          ? "host pids, matching nothing"
          : "as the driver lists them"
      })`,
    };
  },
};

/** A device whose memory reads `[GPU requires reset]` holds its engine, which starts once it recovers. */
export const gpuError: Scenario = {
  id: "gpu-error",
  title: "a GPU in trouble: its engine waits (gpu-error), then starts",
  async run({ world, scope }) {
    if (!world.stage) {
      return { skipped: "a real GPU cannot be made to report an Xid error" };
    }
    await world.stage({ error: "[GPU requires reset]" });
    const cards = {
      held: share("held", world.engineArgs({ mib: 1000 })),
    };
    const port = freePorts(2);
    const launcher = await scope.launch(cards, ["held"], port);
    let view: EngineSeen | undefined;
    const waiting = await until(
      async () => {
        view = (await launcher.engines())?.held;
        return view?.waiting_for?.reason === "gpu-error" ? view : undefined;
      },
      30_000,
      250,
    );
    expect(
      waiting?.state === "waiting",
      "held waiting for gpu-error",
      `${view?.state} (${view?.waiting_for?.reason ?? "no wait"})`,
    );
    const detail = waiting!.waiting_for!.detail;
    await world.stage({});
    const run = await until(() => scope.record(port + 1), 30_000, 100);
    expect(
      run !== undefined,
      "held started once the GPU reported memory",
      "never started",
    );
    return { summary: `waited (${detail}), started once the GPU recovered` };
  },
};

/** A pool given as UUIDs: vLLM gets the integer index under PCI_BUS_ID. */
export const deviceIds: Scenario = {
  id: "device-ids",
  title: "device ids vLLM can read: a UUID pool becomes nvidia-smi's index",
  async run({ world, scope }) {
    const cards = { v: share("v", world.engineArgs({ mib: 1000 })) };
    const port = freePorts(2);
    await scope.launch(cards, ["v"], port, ["--gpus", world.gpu.uuid]);
    const run = await until(() => scope.record(port + 1), 60_000, 100);
    const seen = run?.env.CUDA_VISIBLE_DEVICES;
    expect(
      seen === world.gpu.index,
      `CUDA_VISIBLE_DEVICES=${world.gpu.index} for a pool of ${world.gpu.uuid}`,
      `CUDA_VISIBLE_DEVICES=${seen}`,
    );
    return { summary: `--gpus ${world.gpu.uuid}: vLLM got ${seen}` };
  },
};

/** A liveness restart on a device waits while a neighbour loads there. */
export const quietNeighbour: Scenario = {
  id: "quiet-neighbour",
  title: "a quiet device while a neighbour loads: a liveness restart waits",
  async run({ world, scope }) {
    const cards = {
      hangs: share("hangs", {
        ...world.engineArgs({ mib: 1000 }),
        "fake-hang-after-ms": 1500,
      }),
      slow: share("slow", world.engineArgs({ mib: 1000, loadMs: 8000 })),
    };
    if (world.mode === "real") {
      return { skipped: "the Python engine has no way to stop answering" };
    }
    const port = freePorts(3);
    const launcher = await scope.launch(cards, ["hangs", "slow"], port, [
      "--liveness-failures",
      "2",
    ]);
    const line = await until(
      () =>
        Promise.resolve(
          launcher.lines.find((l) =>
            /liveness restart of engine hangs waits/.test(l)
          ),
        ),
      60_000,
      200,
    );
    expect(
      line !== undefined,
      "one line: the liveness restart waits for slow",
      "no such line",
    );
    const slow = await until(() => scope.record(port + 2), 30_000, 100);
    const next = await until(
      async () => {
        const r = await scope.record(port + 1);
        return r && r.startedAt > slow!.startedAt ? r : undefined;
      },
      60_000,
      100,
    );
    expect(
      next !== undefined && next.startedAt >= slow!.startedAt + 8000,
      "hangs restarted only after slow's 8 s load",
      next
        ? `${seconds(next.startedAt - slow!.startedAt)} after slow started`
        : "no restart",
    );
    return { summary: line! };
  },
};
