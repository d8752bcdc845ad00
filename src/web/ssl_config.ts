import { join } from "node:path";
import { log } from "../common/log.ts";
import { oneLine } from "../common/one_line.ts";
import { InputError } from "../common/config_error.ts";

/** Settings of {@linkcode SSLConfig.fromDirectory}. */
export interface SSLConfigOptions {
  /** Development mode: a present `ssl/ca.crt` is appended to the served chain. @default {false} */
  devMode?: boolean;
  /** The launcher's `SSLKEYLOGFILE`: production warns when it is set. */
  keyLogFile?: string | undefined;
}

/** `Cannot configure TLS: <file>: <what is wrong>`. */
export class SSLConfigError extends InputError {
  constructor(file: string, problem: string, cause?: unknown) {
    const detail = cause === undefined ? "" : `: ${oneLine(cause)}`;
    super(`Cannot configure TLS: ${file}: ${problem}${detail}`, { cause });
    this.name = "SSLConfigError";
  }
}

/** Undefined when absent; a dangling link is present, and unreadable. */
async function readPem(path: string): Promise<string | undefined> {
  try {
    return await Deno.readTextFile(path);
  } catch (error) {
    const absent = error instanceof Deno.errors.NotFound &&
      await Deno.lstat(path).then(() => false, () => true);
    if (absent) return undefined;
    throw new SSLConfigError(path, "cannot read", error);
  }
}

const BEGIN = {
  certificate: /-----BEGIN CERTIFICATE-----/,
  "private key": /-----BEGIN (RSA |EC )?PRIVATE KEY-----/,
};

function parsePem<T>(
  what: keyof typeof BEGIN,
  path: string,
  pem: string,
  parse: (pem: string) => T,
): T {
  if (!BEGIN[what].test(pem)) {
    throw new SSLConfigError(
      path,
      `not a PEM ${what} (expected -----BEGIN ${what.toUpperCase()}-----)`,
    );
  }
  try {
    return parse(pem);
  } catch (error) {
    throw new SSLConfigError(path, `not a valid PEM ${what}`, error);
  }
}

/**
 * The PEM certificate and key to give `Deno.serve`, read from
 * `<directory>/ssl/` and checked to belong together.
 *
 * @example Read the pair (the module example serves it over HTTPS)
 * ```ts
 * import { SSLConfig } from "@mymodel/serve/web";
 * const tls = await SSLConfig.fromDirectory(Deno.cwd());
 * console.log(tls ? `HTTPS, serial ${tls.serial}` : "plain HTTP");
 * ```
 */
export class SSLConfig {
  /** The PEM chain to serve: `server.crt`, then (development) `ca.crt`. */
  declare readonly cert: string;
  /** The PEM private key. */
  declare readonly key: string;
  /** `ca.crt` (development mode, when present). */
  declare readonly ca?: string;
  /** Path of `server.crt`. */
  declare readonly certFile: string;
  /** Path of `server.key`. */
  declare readonly keyFile: string;
  /** The certificate's serial number, as hex digits. */
  declare readonly serial: string;
  /** Path of `ca.crt`, when used. */
  declare readonly caFile?: string;

  private constructor(fields: SSLConfig) {
    Object.assign(this, fields);
  }

  /**
   * Reads `<directory>/ssl/server.crt` and `server.key`: `undefined` when
   * neither exists.
   *
   * @throws {SSLConfigError} When one file is missing, unreadable or not
   *   PEM, or the key does not belong to the certificate.
   */
  static async fromDirectory(
    directory: string,
    options: SSLConfigOptions = {},
  ): Promise<SSLConfig | undefined> {
    const certFile = join(directory, "ssl", "server.crt");
    const keyFile = join(directory, "ssl", "server.key");
    const cert = await readPem(certFile);
    const key = await readPem(keyFile);
    if (cert === undefined && key === undefined) return undefined;
    if (cert === undefined || key === undefined) {
      const [missing, found] = key === undefined
        ? [keyFile, certFile]
        : [certFile, keyFile];
      throw new SSLConfigError(
        missing,
        `missing (found ${found}; both files are needed for HTTPS)`,
      );
    }
    // Loaded only when TLS files exist: it costs a launcher that serves plain
    // HTTP several MiB of resident memory for nothing.
    const { X509Certificate, createPrivateKey } = await import("node:crypto");
    const parseCertificate = (path: string, pem: string) =>
      parsePem("certificate", path, pem, (text) => new X509Certificate(text));
    const certificate = parseCertificate(certFile, cert);
    if (key.includes("-----BEGIN ENCRYPTED PRIVATE KEY-----")) {
      throw new SSLConfigError(
        keyFile,
        "encrypted private keys are not supported; store the key unencrypted (mode 600)",
      );
    }
    const privateKey = parsePem("private key", keyFile, key, createPrivateKey);
    if (!certificate.checkPrivateKey(privateKey)) {
      throw new SSLConfigError(
        `${certFile} and ${keyFile}`,
        "the private key does not belong to the certificate",
      );
    }
    const { validFrom, validTo } = certificate;
    if (Date.parse(validTo) < Date.now()) {
      log.warn(`${certFile}: certificate expired on ${validTo}`);
    } else if (Date.parse(validFrom) > Date.now()) {
      log.warn(`${certFile}: certificate not valid before ${validFrom}`);
    }
    // Whole bytes, as `openssl x509 -serial` prints it: `serialNumber` drops a leading zero nibble.
    const hex = certificate.serialNumber.toLowerCase();
    const serial = hex.padStart(Math.ceil(hex.length / 2) * 2, "0");
    if (!options.devMode && options.keyLogFile) {
      log.warn(
        "SSLKEYLOGFILE is set: TLS session keys are written to disk; unset it in production",
      );
    }
    const served = { cert, key, certFile, keyFile, serial };
    const caFile = join(directory, "ssl", "ca.crt");
    const ca = options.devMode ? await readPem(caFile) : undefined;
    if (ca === undefined) return new SSLConfig(served);
    if (!certificate.checkIssued(parseCertificate(caFile, ca))) {
      log.warn(`${certFile} was not issued by ${caFile}`);
    }
    const chain = `${cert.trimEnd()}\n${ca.trimStart()}`;
    return new SSLConfig({ ...served, cert: chain, ca, caFile });
  }
}
