/**
 * Why a request was refused, in a small fixed set: the label of the
 * `mymodel_auth_failures_total{reason}` counter and the key of the log
 * throttle. The detailed reason (for one log line) stays with each check.
 *
 * @module
 */

/**
 * The fixed set of refusal reasons:
 * - `missing`: no credentials (no `Authorization`, `Bearer` alone, another
 *   scheme, an upgrade without `auth=`);
 * - `malformed`: credentials that cannot be a single compact JWS (several
 *   headers, header and query both, bad segments, bad base64url or JSON);
 * - `signature`: a signature that does not verify, is empty, or uses another
 *   algorithm than HS512 (`none`, downgrades, key confusion);
 * - `expired`: `exp` in the past (beyond the leeway), checked again on every
 *   cached use;
 * - `claims`: `iss`, `aud`, `nbf`, `iat` or a non-finite `exp` refused;
 * - `other`: anything else the verifier threw.
 */
export type AuthFailureReason =
  | "missing"
  | "malformed"
  | "signature"
  | "expired"
  | "claims"
  | "other";

/** Every {@linkcode AuthFailureReason}, in a stable order for reports. */
export const AUTH_FAILURE_REASONS: readonly AuthFailureReason[] = Object
  .freeze([
    "missing",
    "malformed",
    "signature",
    "expired",
    "claims",
    "other",
  ]);

/** Refusals counted per reason since the middleware was created. */
export type AuthFailures = Readonly<Record<AuthFailureReason, number>>;
