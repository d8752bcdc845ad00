/**
 * Remembers tokens that passed every check, the way Envoy's `jwt_authn` cache
 * does, so a client reusing one token pays for HMAC verification once.
 *
 * - The key is the exact token text: a token differing in any byte (a
 *   tampered sibling) is a miss and is verified in full.
 * - Only tokens that passed every check are stored; nothing is remembered of
 *   a refused token.
 * - A hit checks `exp` and `nbf` against the clock again, with the same
 *   leeway as the verifier; an expired token is dropped at once.
 * - At most `capacity` entries; the least recently used goes first.
 *
 * @module
 */

import { TokenError } from "./jwt.ts";

/** The time claims of a verified token, all a hit needs. */
export interface CachedTimes {
  /** `exp`, seconds since the epoch, finite (the verifier checked it). */
  exp: number;
  /** `nbf`, when the token has one. */
  nbf: number | undefined;
}

/** Settings of a {@linkcode TokenCache}. */
export interface TokenCacheOptions {
  /** Most tokens kept. */
  capacity: number;
  /** Clock skew tolerated on `exp` and `nbf`, in seconds (the verifier's). */
  leewaySeconds: number;
}

/** A bounded LRU of verified tokens. */
export class TokenCache {
  // A Map iterates in insertion order: re-inserting on a hit keeps the least
  // recently used entry first.
  #entries = new Map<string, CachedTimes>();
  #capacity: number;
  #leeway: number;

  constructor(options: TokenCacheOptions) {
    const capacity = options.capacity;
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new RangeError(
        `Cannot create the token cache: capacity ${capacity}, expected an integer >= 1`,
      );
    }
    this.#capacity = capacity;
    this.#leeway = options.leewaySeconds;
  }

  /** How many tokens are kept. */
  get size(): number {
    return this.#entries.size;
  }

  /**
   * `true` for a cached token whose times still hold, `false` when not cached;
   * throws {@linkcode TokenError} (and forgets it) when they no longer hold.
   */
  check(token: string, now: number): boolean {
    const times = this.#entries.get(token);
    if (times === undefined) return false;
    // The verifier's own comparisons, so a hit is never more lenient.
    if (!(times.exp > now - this.#leeway)) {
      this.#entries.delete(token);
      throw new TokenError("expired", "expired (exp)");
    }
    if (times.nbf !== undefined && times.nbf > now + this.#leeway) {
      this.#entries.delete(token);
      throw new TokenError("claims", "not yet valid (nbf)");
    }
    this.#entries.delete(token);
    this.#entries.set(token, times);
    return true;
  }

  /** Remembers a token that passed every check. */
  add(token: string, times: CachedTimes): void {
    this.#entries.delete(token);
    this.#entries.set(token, times);
    if (this.#entries.size > this.#capacity) {
      const oldest = this.#entries.keys().next();
      if (!oldest.done) this.#entries.delete(oldest.value);
    }
  }

  /** Forgets every token. */
  clear(): void {
    this.#entries.clear();
  }
}
