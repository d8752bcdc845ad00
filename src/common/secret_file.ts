// Secrets from files (`NAME_FILE`), as containers and systemd hand them over:
// they stay out of the environment every child inherits. A message names the
// variable and the file, never the secret.

import { ConfigError } from "./config_error.ts";
import { log } from "./log.ts";
import { oneLine } from "./one_line.ts";

function readSecretFile(variable: string, path: string): string {
  let bytes: Uint8Array;
  let mode: number | null;
  try {
    // stat follows links, as the read does: the mode is the file's own.
    mode = Deno.statSync(path).mode;
    bytes = Deno.readFileSync(path);
  } catch (cause) {
    const why = oneLine(cause);
    throw new ConfigError(
      `Cannot read ${variable}=${path}: ${why} (expected a readable file holding the secret)`,
      { cause },
    );
  }
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch (cause) {
    throw new ConfigError(
      `Cannot use ${variable}=${path}: not valid UTF-8 (expected the secret as text)`,
      { cause },
    );
  }
  // One trailing newline, as `echo` and editors add; CRLF counts as one.
  const value = text.replace(/\r?\n$/, "");
  if (value === "") {
    throw new ConfigError(
      `Cannot use ${variable}=${path}: the file is empty (expected the secret)`,
    );
  }
  if (mode !== null && (mode & 0o044) !== 0) {
    const octal = (mode & 0o777).toString(8).padStart(4, "0");
    log.warn(
      `${variable}=${path} is readable by group or others (mode ${octal}); chmod 600 it`,
    );
  }
  return value;
}

/** From `name` itself or the file `<name>_FILE` names; an empty variable counts as unset. */
export function secretFromEnv(
  name: string,
  env: (variable: string) => string | undefined,
): string {
  const fileVariable = `${name}_FILE`;
  const direct = env(name) ?? "";
  const path = env(fileVariable) ?? "";
  if (direct !== "" && path !== "") {
    throw new ConfigError(
      `Cannot read ${name}: both ${name} and ${fileVariable} are set (expected one of them)`,
    );
  }
  return path === "" ? direct : readSecretFile(fileVariable, path);
}
