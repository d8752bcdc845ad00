/**
 * A wall clock that steps (NTP, a VM resume) for the whole test process.
 * Imported first, before any module keeps `Date.now` in a constant (a clock
 * object's `now: Date.now`), so that every reader of the wall sees the step.
 */
const system = Date.now;
let offset = 0;
Date.now = () => system() + offset;

/** Steps `Date.now` by `ms` until disposed (`using`). */
export function stepWall(ms: number): Disposable {
  offset += ms;
  return { [Symbol.dispose]: () => void (offset -= ms) };
}
