// Who is put to sleep so that another engine fits on a device: one function,
// one ordering rule (Ollama's `findRunnerToUnload` is the shape; lemonade's
// eviction score the order). Bytes, not counts: victims are taken until what
// they free covers what is missing. Pure: the launcher reads the facts.

/** An engine the launcher may put to sleep, as the make-room rule sees it. */
export interface RoomCandidate {
  readonly name: string;
  /** MiB it gives back on the device by sleeping (what it holds awake, less its residue). */
  readonly freesMiB: number;
  /** `pin: true` on its card. */
  readonly pinned: boolean;
  /** Its card's `priority`: lowest goes first. */
  readonly priority: number;
  /** Something in flight (its API server's load, or its running gauge). */
  readonly busy: boolean;
  /** Seconds since it last woke or started. */
  readonly awakeSeconds: number;
  /** Seconds since something was last in flight. */
  readonly idleSeconds: number;
  /** Its last measured wake, null before its first. */
  readonly wakeSeconds: number | null;
}

/** Victims in the order they are put to sleep, or why none will do. */
export type Room =
  | { readonly victims: readonly string[]; readonly freesMiB: number }
  | { readonly why: string };

/** A wake that was never measured is taken as this (vLLM's level-1 wake of a small model: 0.1–0.4 s). */
const UNMEASURED_WAKE_S = 0.5;

/**
 * The engines to put to sleep for `missingMiB` more on a device: never a
 * pinned one, a busy one or one awake for less than `guardSeconds`; the
 * lowest priority first, then the cheapest to bring back for its idleness
 * (idle seconds over its wake seconds, highest first).
 *
 * @example
 * ```ts
 * const a = { name: "a", freesMiB: 9000, pinned: false, priority: 0, busy: false, awakeSeconds: 60, idleSeconds: 30, wakeSeconds: 0.3 };
 * makeRoom(8000, [a, { ...a, name: "b", idleSeconds: 50 }], 2); // { victims: ["b"], freesMiB: 9000 }
 * ```
 */
export function makeRoom(
  missingMiB: number,
  candidates: readonly RoomCandidate[],
  guardSeconds: number,
): Room {
  const barred = (c: RoomCandidate) =>
    c.pinned
      ? "pinned"
      : c.busy
      ? "busy"
      : c.awakeSeconds < guardSeconds
      ? `woken ${c.awakeSeconds.toFixed(1)} s ago`
      : c.freesMiB <= 0
      ? "frees nothing"
      : undefined;
  const score = (c: RoomCandidate) =>
    c.idleSeconds / Math.max(c.wakeSeconds ?? UNMEASURED_WAKE_S, 0.01);
  const open = candidates.filter((c) => !barred(c))
    .sort((a, b) => a.priority - b.priority || score(b) - score(a));
  let taken: RoomCandidate[] = [];
  let frees = 0;
  for (const c of open) {
    if (frees >= missingMiB) break;
    taken.push(c);
    frees += c.freesMiB;
  }
  // None put to sleep for nothing: one the later ones cover without it is
  // spared, unless that would spare a lower priority for a higher one.
  for (const c of [...taken]) {
    const rest = taken.filter((t) => t !== c);
    const higher = rest.some((t) => t.priority > c.priority);
    if (!higher && frees - c.freesMiB >= missingMiB) {
      [taken, frees] = [rest, frees - c.freesMiB];
    }
  }
  const victims = taken.map((c) => c.name);
  if (frees >= missingMiB) return { victims, freesMiB: frees };
  const held = candidates.map((c) => `${c.name} ${barred(c) ?? "idle"}`);
  const can = `${Math.floor(frees)} MiB can be freed`;
  return {
    why: `needs ${Math.ceil(missingMiB)} MiB more, ${can} (${
      held.join(", ") || "no engine the launcher wakes is awake there"
    })`,
  };
}

/** An engine on one device as a start loads it, for {@linkcode startsAsleep}. */
export interface Loaded {
  readonly name: string;
  readonly needMiB: number;
  /** Only for one the launcher sleeps and wakes: what it keeps asleep. */
  readonly residueMiB?: number;
  readonly pinned: boolean;
  readonly priority: number;
}

/**
 * Who is asleep once every engine of a device has loaded in request order,
 * each one that does not fit making room as a wake does (`makeRoom`, the
 * earliest loaded the idlest); what is left of `totalMiB` then.
 *
 * @example `startsAsleep([a10g, b10g, c10g], 24576).asleep` is `["a"]` (three launcher-woken 10 GiB cards).
 */
export function startsAsleep(
  engines: readonly Loaded[],
  totalMiB: number,
): { asleep: string[]; leftMiB: number } {
  const asleep = new Set<string>();
  const held = (e: Loaded) => asleep.has(e.name) ? e.residueMiB! : e.needMiB;
  const loaded: Loaded[] = [];
  for (const e of engines) {
    const used = loaded.reduce((sum, l) => sum + held(l), 0);
    const missing = used + e.needMiB - totalMiB;
    if (missing > 0) {
      const room = makeRoom(
        missing,
        loaded.filter((l) => l.residueMiB !== undefined && !asleep.has(l.name))
          .map((l, i) => ({
            name: l.name,
            freesMiB: l.needMiB - l.residueMiB!,
            pinned: l.pinned,
            priority: l.priority,
            busy: false,
            awakeSeconds: Infinity,
            idleSeconds: engines.length - i,
            wakeSeconds: null,
          })),
        0,
      );
      if ("victims" in room) room.victims.forEach((v) => asleep.add(v));
    }
    loaded.push(e);
  }
  const used = loaded.reduce((sum, l) => sum + held(l), 0);
  return { asleep: [...asleep], leftMiB: totalMiB - used };
}
