/**
 * Settings resolved from the environment when this module is first imported
 * (the launcher itself reads the same variables each time it is called; the
 * IDP secret is not exported here).
 * A command-line flag always wins over the variable it mirrors.
 *
 * | variable | meaning | default |
 * |---|---|---|
 * | `MY_LOCAL` | root directory (`models/`, `logs/`, `metrics/`, `data/`) | none: `--directory` is then required |
 * | `NUCLEUS_HOST` | host of the management API and every engine | `localhost` |
 * | `NUCLEUS_PORT` | management port; engine n listens on port + n | `5000` |
 * | `NUCLEUS_MODE` | `dev…` means development mode (no auth); any other value, empty included, production | `dev` when unset |
 * | `LOCAL_ENGINE_API_KEY` | key every engine demands (`--api-key`) | none |
 * | `LOCAL_ENGINE_API_KEY_FILE` | a file holding that key instead | none |
 * | `IDP_SECRET`, `IDP_ISSUER` | HS512 secret and issuer for production mode | none |
 * | `IDP_SECRET_FILE` | a file holding that secret instead | none |
 *
 * A `*_FILE` variable names a file (a container secret, a systemd credential)
 * whose content, less one trailing newline, is the value: the secret then
 * stays out of the environment every child process and `/proc/<pid>/environ`
 * see. Setting both forms of one variable, or naming a missing, unreadable or
 * empty file, throws a {@linkcode ConfigError} at import; a file readable by
 * group or others is used with a warning.
 *
 * @example
 * ```ts
 * import { NUCLEUS_HOST, NUCLEUS_PORT } from "@mymodel/serve/common";
 * console.log(`management API at http://${NUCLEUS_HOST}:${NUCLEUS_PORT}`);
 * ```
 *
 * @module
 */
export { configureLogging } from "./common/log.ts";
export { ConfigError, InputError } from "./common/config_error.ts";
export {
  DEV_MODE_DEFAULT,
  IDP_ISSUER,
  LOCAL_ENGINE_API_KEY,
  MY_LOCAL,
  NUCLEUS_HOST,
  NUCLEUS_MODE,
  NUCLEUS_PORT,
} from "./common/environment.ts";
