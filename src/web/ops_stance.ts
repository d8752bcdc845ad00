/**
 * The operating mode: development (no authentication) or production (an HS512
 * JWT on every connection).
 *
 * @module
 */
import { ConfigError } from "../common/config_error.ts";
import { secretFromEnv } from "../common/secret_file.ts";
import { isDevMode } from "../common/settings.ts";
import { AuthMiddleware } from "../web.ts";

/** The two operating modes. */
export type Mode = "development" | "production";

/** Where production mode's settings come from; defaults are read from the environment when it resolves. */
export interface OpsStanceOptions {
  /**
   * Development mode. Unset: true when `NUCLEUS_MODE` starts with `dev`.
   * @default {true while NUCLEUS_MODE starts with "dev"}
   */
  dev_mode?: boolean;
  /**
   * HS512 secret (raw text).
   * @default {IDP_SECRET or the file IDP_SECRET_FILE names}
   */
  secret?: string;
  /**
   * Issuer every token must carry.
   * @default {IDP_ISSUER}
   */
  issuer?: string;
}

/**
 * The launcher's mode and the authentication that goes with it. Resolving a
 * production stance checks `IDP_SECRET` and `IDP_ISSUER` at once, so a launcher
 * that cannot authenticate refuses to start.
 *
 * @example
 * ```ts
 * import { OpsStance } from "@mymodel/serve/serve";
 * const stance = OpsStance.resolve({ dev_mode: true });
 * console.assert(stance.mode === "development");
 * ```
 */
export class OpsStance {
  /** `development` or `production`. */
  readonly mode: Mode;
  /** The middleware every request passes through (a pass-through in development). */
  readonly auth: AuthMiddleware;

  private constructor(mode: Mode, auth: AuthMiddleware) {
    this.mode = mode;
    this.auth = auth;
  }

  /**
   * Resolves the mode from the flag (which wins) or `NUCLEUS_MODE`.
   *
   * @param options The flag and, for production, the secret and issuer.
   * @returns The stance.
   * @throws {ConfigError} In production when the secret or issuer is missing or empty.
   */
  static resolve(options: OpsStanceOptions = {}): OpsStance {
    const dev = options.dev_mode ??
      isDevMode(Deno.env.get("NUCLEUS_MODE") || "dev");
    if (dev) return new OpsStance("development", AuthMiddleware.development());
    const secret = options.secret ?? secretFromEnv("IDP_SECRET");
    const issuer = options.issuer ?? Deno.env.get("IDP_ISSUER") ?? "";
    const missing = [
      secret ? "" : "IDP_SECRET",
      issuer ? "" : "IDP_ISSUER",
    ].filter(Boolean);
    if (missing.length > 0) {
      throw new ConfigError(
        `Cannot start in production mode: ${
          missing.join(" and ")
        } must be set and non-empty (or run with --dev_mode)`,
      );
    }
    return new OpsStance("production", new AuthMiddleware({ secret, issuer }));
  }

  /** True in development mode. */
  get devMode(): boolean {
    return this.mode === "development";
  }

  /** One line for the start-up log. */
  describe(): string {
    return this.devMode
      ? "mode: development (no authentication)"
      : "mode: production (HS512 JWT required on every connection)";
  }
}
