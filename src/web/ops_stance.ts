import { ConfigError } from "../common/config_error.ts";
import { AuthMiddleware } from "./auth_middleware.ts";

type OpsStanceOptions = { dev_mode: boolean; secret?: string; issuer?: string };

/** Why production mode cannot start with this secret and issuer, or undefined. */
export function productionRefusal(
  secret: string,
  issuer: string,
): string | undefined {
  const missing = [secret ? "" : "IDP_SECRET", issuer ? "" : "IDP_ISSUER"]
    .filter(Boolean).join(" and ");
  if (missing === "") return undefined;
  return `Cannot start in production mode: ${missing} must be set and non-empty (or run with --dev_mode)`;
}

/**
 * The launcher's mode and the authentication that goes with it. Resolving a
 * production stance checks the secret and issuer at once, so a launcher that
 * cannot authenticate refuses to start.
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
  readonly mode: "development" | "production";
  /** The middleware every request passes through (a pass-through in development). */
  readonly auth: AuthMiddleware;

  private constructor(mode: OpsStance["mode"], auth: AuthMiddleware) {
    this.mode = mode;
    this.auth = auth;
  }

  /**
   * The stance these options ask for.
   * @throws {ConfigError} In production when the secret or issuer is missing or empty.
   */
  static resolve(options: OpsStanceOptions): OpsStance {
    if (options.dev_mode) {
      return new OpsStance("development", AuthMiddleware.development());
    }
    const { secret = "", issuer = "" } = options;
    const refusal = productionRefusal(secret, issuer);
    if (refusal) throw new ConfigError(refusal);
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
