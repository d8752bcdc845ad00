// More models than memory, without a proxy (../shared/RESIDENCY.md): the
// engines the launcher sleeps and wakes (vLLM's routes) are put to sleep when
// idle for their `sleep_after`, woken when a request parks in their `/load`,
// and, for a wake or a start that does not fit, others are put to sleep first
// (`gpu/make_room.ts`). Requests never pass through here: they wait parked in
// the engine itself. One switch at a time; nothing here wakes a sleeper
// except for a parked request.
import { log } from "../common/log.ts";
import { type Clock, REAL_CLOCK, shownAt, sleep } from "../common/sleep.ts";
import { askEngine, engineOrigin } from "../engines/metrics_read.ts";
import type { ServerProcess } from "../engines/server_process.ts";
import {
  askSleep,
  askWake,
  engineVersion,
  routesOf,
  serverLoad,
  sleepRouteOpen,
} from "../engines/sleep_routes.ts";
import { cheapRequest } from "../engines/traffic.ts";
import type { GpuLifecycle } from "../gpu/gpu_lifecycle.ts";
import { makeRoom, type RoomCandidate } from "../gpu/make_room.ts";
import {
  deviceOf,
  type GpuMonitor,
  type GpuSnapshot,
} from "../gpu/nvidia_smi.ts";
import type { EngineRun } from "../supervision/engine_run.ts";
import type { Journal } from "../supervision/journal.ts";

/** `/load` is read this often while an engine the launcher wakes runs. */
export const LOAD_POLL_MS = 250;
// Never put to sleep one woken less than this ago: no evict/reload loop (Ollama #18282).
const GUARD_S = 1;
const PROBE_MS = 30_000;
// A look asked after the last sleep, wake, spawn or exit this young holds
// every engine's memory (only another user's job could have moved since).
const LOOK_MS = 1_000;
const WAKE_TRIES = 3;
const WAKE_RETRY_MS = 2_000;
const ROOM = "put to sleep to make room for ";

export interface ResidencyOptions {
  readonly runs: () => readonly EngineRun[];
  readonly gpu: GpuLifecycle | undefined;
  readonly monitor: GpuMonitor;
  readonly journal?: Journal | undefined;
  readonly clock?: Clock;
}

/** What the launcher knows of one run it sleeps and wakes. */
interface Seen {
  load: number | undefined;
  busyAt: number; // last time something was in flight
  awakeAt: number; // its start or its last wake
  parkedAt: number | null;
  madeRoom: string[];
  said: string | null; // the wait's reason, journaled once
  retryAt: number; // a refused sleep or failed wake is tried again only after this
  failures: number; // wakes failed in a row
  waking: boolean; // its wake asked, not answered
}

/** The launcher's side of sleep and wake for the engines whose kind lets it drive them; e.g. `new Residency(o).start()`. */
export class Residency {
  readonly #o: ResidencyOptions;
  readonly #seen = new WeakMap<ServerProcess, Seen>();
  /** By executable: the probe's verdict, null when it passed. */
  readonly #probes = new Map<string, Promise<string | null>>();
  readonly #passed = new Set<string>();
  readonly #stop = new AbortController();
  #loop: Promise<void> | undefined;

  constructor(options: ResidencyOptions) {
    this.#o = options;
  }

  start(): void {
    this.#loop ??= this.#run();
  }

  async stop(): Promise<void> {
    this.#stop.abort();
    await this.#loop;
  }

  get #clock(): Clock {
    return this.#o.clock ?? REAL_CLOCK;
  }

  async #run(): Promise<void> {
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      try {
        await this.#tick();
      } catch (error) {
        log.warn(`residency: ${(error as Error).message}`);
      }
      await sleep(LOAD_POLL_MS, signal, this.#clock);
    }
  }

  async #tick(): Promise<void> {
    const signal = this.#stop.signal;
    const runs = this.#o.runs().filter((r) =>
      routesOf(r.plan) && !r.serving.sleep.view()?.launcher_sleep_off
    );
    const live = runs.filter((r) =>
      ["ready", "sleeping", "waking"].includes(r.state) && r.process.running
    );
    await Promise.all(live.map(async (r) => {
      const seen = this.#of(r);
      seen.load = await serverLoad(r.plan, signal);
      if ((seen.load ?? 0) > 0) seen.busyAt = this.#now();
    }));
    for (const r of live) {
      if (signal.aborted) return;
      if (r.state === "ready" && !(await this.#probed(r))) continue;
      const seen = this.#of(r);
      const idle = (this.#now() - seen.busyAt) / 1000;
      const after = r.serving.sleep.view()?.after_seconds ?? Infinity;
      if (r.state === "ready" && seen.load === 0 && idle >= after) {
        await this.#sleep(r, `asleep after ${after} s idle`);
      }
    }
    const parked = live.filter((r) =>
      r.state !== "ready" && (this.#of(r).load ?? 0) > 0
    ).sort((a, b) =>
      (this.#of(a).parkedAt ?? Infinity) - (this.#of(b).parkedAt ?? Infinity)
    );
    for (const r of parked) if (!signal.aborted) await this.#wake(r, runs);
    // A wake not begun whose parked request left (its client gave up).
    for (const r of live) {
      const seen = this.#of(r);
      if (r.state !== "waking" || seen.load !== 0 || seen.waking) continue;
      [seen.parkedAt, seen.said] = [null, null];
      const why = "its parked request left before its wake";
      this.#tell(r, true, why);
    }
    // Starts held for memory: more cards than fit load one after another.
    for (const r of runs) {
      const waiting = r.detail().waiting_for;
      if (r.state !== "waiting" || waiting?.reason !== "gpu-memory-free") {
        continue;
      }
      const need = r.plan.placement.memoryNeed;
      if (!need || signal.aborted) continue;
      await this.#room(r, runs, (total) => need.mib ?? need.fraction * total);
    }
  }

  #of(r: EngineRun): Seen {
    let seen = this.#seen.get(r.process);
    if (!seen) {
      const now = this.#now();
      seen = {
        load: undefined,
        busyAt: now,
        awakeAt: now,
        parkedAt: null,
        madeRoom: [],
        said: null,
        retryAt: 0,
        failures: 0,
        waking: false,
      };
      this.#seen.set(r.process, seen);
    }
    return seen;
  }

  /** Put to sleep, `mode=wait` (nothing is in flight: what comes meanwhile parks). */
  /** `hold`: its wake follows at once (the probe's), so its room stays kept meanwhile. */
  async #sleep(r: EngineRun, why: string, hold = false): Promise<boolean> {
    const seen = this.#of(r);
    if (this.#now() < seen.retryAt) return false;
    const process = r.process;
    r.serving.sleep.because(why); // its own line may come first
    const answer = await askSleep(r.plan, true, this.#stop.signal);
    if (!answer.ok) {
      r.serving.sleep.because(null);
      seen.retryAt = this.#now() + 30_000;
      log.warn(
        `engine ${r.name} (pid ${process.pid}): its ${
          routesOf(r.plan)!.sleep
        } ${answer.why}: not asleep (asked again in 30 s)`,
      );
      return false;
    }
    this.#o.monitor.mark(); // its memory changed: no earlier look will do
    if (why.startsWith(ROOM)) r.serving.sleep.madeRoom();
    this.#tell(r, true, why);
    // Within the same turn: no start is let into the room it just freed.
    if (hold) this.#tell(r, true, why, true);
    return true;
  }

  /** A request is parked in a sleeper: make room where it must, then wake it. */
  async #wake(r: EngineRun, runs: readonly EngineRun[]): Promise<void> {
    const seen = this.#of(r);
    const process = r.process;
    if (r.state === "sleeping") {
      seen.parkedAt ??= this.#now();
      seen.madeRoom = [];
      const why = `a request parked in its ${routesOf(r.plan)!.load.path}`;
      this.#tell(r, true, why, true);
    }
    if (r.state !== "waking" || this.#now() < seen.retryAt) return;
    // Waking, its room is counted as kept (gpu_lifecycle.ts): the device's
    // free memory must only not be negative.
    if (!(await this.#room(r, runs, () => 0))) return;
    r.serving.sleep.waitsFor("its wake");
    r.serving.sleep.wakeSent(process);
    seen.waking = true;
    const answer = await askWake(r.plan, this.#stop.signal);
    seen.waking = false;
    if (this.#stop.signal.aborted) return;
    if (!answer.ok) {
      // vLLM stays asleep after a failed wake, its requests parked: newer
      // builds roll the wake back (device_allocator/cumem.py) and a later one
      // can succeed; older ones fail every later wake
      // (llm-d-fast-model-actuation #746): a restart is then the way back.
      const failed = `its ${routesOf(r.plan)!.wake} ${answer.why}`;
      this.#say(r, "wake-failed", failed);
      if (++seen.failures < WAKE_TRIES) {
        seen.retryAt = this.#now() + WAKE_RETRY_MS;
        return this.#wait(r, `another try of its wake (${failed})`);
      }
      const tries = `${WAKE_TRIES} wakes in a row failed (${failed})`;
      return r.send({ kind: "wake-failed", run: process, seen: tries });
    }
    seen.failures = 0;
    this.#o.monitor.mark();
    r.serving.sleep.woken(process);
    const seconds = (this.#now() - (seen.parkedAt ?? this.#now())) / 1000;
    const made = seen.madeRoom;
    r.serving.sleep.switched(seconds, made);
    [seen.parkedAt, seen.said, seen.awakeAt] = [null, null, this.#now()];
    seen.busyAt = this.#now();
    const room = made.length ? `, put ${made.join(", ")} to sleep for it` : "";
    const detail = `woken for a parked request in ${
      seconds.toFixed(2)
    } s${room}`;
    this.#say(r, "switch", detail);
    this.#tell(r, false, detail);
  }

  /**
   * Room on each of `r`'s devices for `need(total, entry)` more MiB: true when
   * there is (and no other load runs there); else idle engines are put to
   * sleep (`makeRoom`), or the wait's reason is shown and journaled once.
   */
  async #room(
    r: EngineRun,
    runs: readonly EngineRun[],
    need: (totalMiB: number, entry: string) => number,
  ): Promise<boolean> {
    const { gpu, monitor } = this.#o;
    const devices = r.gpus ?? [];
    if (!gpu || devices.length === 0) return true; // nothing to count it by
    for (let look = 0; look < 3; look++) {
      // Asked after the last sleep or wake that answered.
      const snapshot = await monitor.snapshot(LOOK_MS, monitor.marked);
      if (!snapshot) return this.#wait(r, "nvidia-smi's answer"), false;
      const loading = gpu.gate.loadingOn(devices, r.name);
      if (loading) {
        return this.#wait(r, `engine ${loading}'s load on the same GPU`), false;
      }
      const short = devices.flatMap((entry) => {
        const total = totalOf(snapshot, entry);
        const free = gpu.free(entry, snapshot);
        if (total === undefined || free === undefined) return [];
        const missing = need(total, entry) - free;
        return missing > 0 ? [[entry, missing] as const] : [];
      });
      if (short.length === 0) return true;
      const [entry, missing] = short[0]!;
      const others = runs.filter((o) =>
        o !== r && o.state === "ready" && o.gpus?.includes(entry) &&
        this.#passed.has(o.plan.executable) &&
        !o.serving.sleep.view()?.launcher_sleep_off
      );
      const room = makeRoom(
        missing,
        others.map((o) => this.#candidate(o, entry, snapshot)),
        GUARD_S,
      );
      if ("why" in room) {
        return this.#wait(r, `room on GPU ${entry}: ${room.why}`), false;
      }
      const victims = others.filter((o) => room.victims.includes(o.name));
      const why = `${ROOM}${r.name}`;
      const slept = await Promise.all(victims.map((v) => this.#sleep(v, why)));
      for (const v of victims) {
        this.#say(v, "made-room", `${why} (GPU ${entry})`);
      }
      if (!slept.every(Boolean)) return false;
      this.#of(r).madeRoom.push(...victims.map((v) => v.name));
      gpu.gate.changed([entry]);
    }
    return false;
  }

  #candidate(
    o: EngineRun,
    entry: string,
    snapshot: GpuSnapshot,
  ): RoomCandidate {
    const seen = this.#of(o);
    const sleep = o.serving.sleep.view();
    // What it holds by this look (a health round's may predate a wake).
    const holds = this.#o.gpu?.holds(o, snapshot)?.[entry] ??
      o.plan.placement.memoryNeed?.mib ?? 0;
    const residue = sleep?.residue_bytes != null
      ? sleep.residue_bytes / 2 ** 20
      : routesOf(o.plan)!.residueMiB;
    const now = this.#now();
    return {
      name: o.name,
      freesMiB: holds - residue,
      pinned: o.plan.card.pin === true,
      priority: o.plan.card.priority ?? 0,
      // Its API server's own count, read this tick; unread is busy.
      busy: (seen.load ?? 1) > 0,
      awakeSeconds: (now - seen.awakeAt) / 1000,
      idleSeconds: (now - seen.busyAt) / 1000,
      wakeSeconds: sleep?.last_wake_seconds ?? null,
    };
  }

  /** The wait's reason in its view, journaled once a reason (its figures move each poll). */
  #wait(r: EngineRun, what: string): void {
    r.serving.sleep.waitsFor(what);
    const seen = this.#of(r);
    const kind = what.replace(/\d+(?:\.\d+)?/g, "#");
    if (seen.said === kind) return;
    seen.said = kind;
    const its = r.state === "waiting" ? "its start" : "its wake";
    this.#say(r, "wake-waits", `${its} waits for ${what}`);
  }

  /** Once per build (its executable): sleep, a parked request, a wake, the answer. */
  #probed(r: EngineRun): Promise<boolean> {
    const key = r.plan.executable;
    let verdict = this.#probes.get(key);
    if (!verdict) {
      verdict = this.#probe(r).then((why) => {
        if (why === null) this.#passed.add(key);
        return why;
      });
      this.#probes.set(key, verdict);
    }
    return verdict.then((why) => {
      if (why === null) return true;
      if (r.serving.sleep.view()?.launcher_sleep_off) return false;
      r.serving.sleep.off(why);
      log.warn(
        `engine ${r.name}: runs without launcher-driven sleep: ${why}; its memory stays counted awake`,
      );
      this.#say(r, "sleep-off", why);
      return false;
    });
  }

  async #probe(r: EngineRun): Promise<string | null> {
    const { plan, process } = r;
    const signal = this.#stop.signal;
    const routes = routesOf(plan)!;
    const version = await engineVersion(plan, signal);
    if (version && older(version, routes.parksSince)) {
      return `vLLM ${version} does not park requests while asleep (a request then crashes its engine core: vLLM #15483; parking since ${routes.parksSince})`;
    }
    if (plan.apiKey && await sleepRouteOpen(plan, signal)) {
      return `its ${routes.asleep} answers without the engine key (released vLLM's --api-key guards only /v1 and a few other API prefixes, vLLM PR #58028): anyone who reaches its port could put it to sleep`;
    }
    const probe = "the probe of its build";
    if (!(await this.#sleep(r, `put to sleep by ${probe}`, true))) {
      return `its ${routes.sleep} failed at the probe`;
    }
    const request = cheapRequest(plan.card);
    const url = engineOrigin(plan.host, plan.port) + (request?.path ?? "");
    const asked = request
      ? askEngine(url, {
        apiKey: plan.apiKey,
        timeoutMs: PROBE_MS,
        maxBytes: 1024 * 1024,
        body: request.body,
        signal,
      })
      : undefined;
    let parked = false;
    for (let i = 0; request && i < 40 && !parked && !signal.aborted; i++) {
      parked = (await serverLoad(plan, signal) ?? 0) >= 1;
      if (!parked) await sleep(50, signal, this.#clock);
    }
    r.serving.sleep.wakeSent(process);
    const woke = await askWake(plan, signal);
    if (woke.ok) r.serving.sleep.woken(process);
    this.#tell(r, false, probe);
    this.#of(r).awakeAt = this.#now();
    const answer = await asked;
    if (!woke.ok) return `its ${routes.wake} ${woke.why} at the probe`;
    if (!request) return null; // a verb with no cheap request: the routes answered
    if (!parked) {
      return `a request sent while it slept did not show in its ${routes.load.path}`;
    }
    if (!answer?.ok) {
      return `a request parked while it slept ${answer?.why} after its wake`;
    }
    this.#say(r, "probe", "its sleep, a parked request and its wake work");
    return null;
  }

  /** The launcher's own sleep or wake of it (`waking`: begun), as sure as the engine's line. */
  #tell(r: EngineRun, asleep: boolean, why: string, waking = false): void {
    const run = r.process;
    r.send({ kind: "sleep", run, asleep, why, waking, sure: true });
  }

  #say(r: EngineRun, reason: string, detail: string): void {
    const pid = r.process.pid === undefined ? "" : ` (pid ${r.process.pid})`;
    log.info(`engine ${r.name}${pid} ${detail}`);
    const at = shownAt(this.#clock, this.#now());
    this.#o.journal?.record({
      at,
      model: r.name,
      event: "sleep",
      reason,
      detail,
    });
  }

  #now(): number {
    return this.#clock.now();
  }
}

/** `0.16.2` before `0.17.0`; a development build (`0.17.1.dev12+g…`) by its release. */
function older(version: string, than: string): boolean {
  const parts = (v: string) => v.split(/[.+-]/).slice(0, 3).map(Number);
  const [a, b] = [parts(version), parts(than)];
  for (let i = 0; i < 3; i++) {
    if (!Number.isFinite(a[i])) return false;
    if (a[i] !== b[i]) return a[i]! < b[i]!;
  }
  return false;
}

function totalOf(snapshot: GpuSnapshot, entry: string): number | undefined {
  const device = deviceOf(entry, snapshot);
  return device?.memoryKnown ? device.totalMiB : undefined;
}
