// For library users, read at import (the table is in the door, `common.ts`);
// the launcher reads the environment when it is made (`serve/config.ts`).
import { isDevMode, readEnvironment } from "./settings.ts";

const read = readEnvironment(Deno.env.toObject());

/** Root directory from `MY_LOCAL`, checked to exist at import; `undefined` when unset. */
export const MY_LOCAL: string | undefined = read.myLocal;

/** Host from `NUCLEUS_HOST`, else `localhost`. */
export const NUCLEUS_HOST: string = read.host;

/** Management port from `NUCLEUS_PORT` (checked at import), else `5000`. */
export const NUCLEUS_PORT: number = read.port;

/** Mode from `NUCLEUS_MODE` (set but empty: `""`, production), unset: `dev`; a value starting with `dev` means development. */
export const NUCLEUS_MODE: string = read.mode;

/** True when {@linkcode NUCLEUS_MODE} starts with `dev`. */
export const DEV_MODE_DEFAULT: boolean = isDevMode(read.mode);

/** API key every engine demands, from `LOCAL_ENGINE_API_KEY` or the file `LOCAL_ENGINE_API_KEY_FILE` names; empty for none. */
export const LOCAL_ENGINE_API_KEY: string = read.engineKey;

/** Issuer every production token must carry, from `IDP_ISSUER`; empty when unset. */
export const IDP_ISSUER: string = read.idpIssuer;
