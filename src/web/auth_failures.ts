/**
 * Why a request was refused: the label of
 * `mymodel_auth_failures_total{reason}` and the log throttle's key.
 * - `missing`: no credentials (no `Authorization`, `Bearer` alone, another
 *   scheme, an upgrade without `auth=`);
 * - `malformed`: credentials that cannot be a single compact JWS (several
 *   headers, header and query both, bad segments, bad base64url or JSON);
 * - `signature`: a signature that does not verify, is empty, or uses another
 *   algorithm than HS512 (`none`, downgrades, key confusion);
 * - `expired`: `exp` in the past (beyond the leeway);
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

/** In a stable order for reports. */
export const AUTH_FAILURE_REASONS: readonly AuthFailureReason[] = [
  "missing",
  "malformed",
  "signature",
  "expired",
  "claims",
  "other",
];

/** Refusals counted per reason since the middleware was created. */
export type AuthFailures = Readonly<Record<AuthFailureReason, number>>;
