/**
 * TLS for the management API: the PEM pair `Deno.serve` takes, read from
 * `<directory>/ssl/` and checked to belong together.
 *
 * @module
 */
import { join } from "node:path";
// node:crypto is loaded only when TLS files exist: it costs a launcher that
// serves plain HTTP several MiB of resident memory for nothing.
import type { KeyObject, X509Certificate } from "node:crypto";

type Crypto = typeof import("node:crypto");
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

/**
 * TLS cannot be configured from the files found:
 * `Cannot configure TLS: <file>: <what is wrong>`.
 *
 * @example
 * ```ts
 * import { SSLConfigError } from "@mymodel/serve/web";
 * import assert from "node:assert";
 *
 * const error = new SSLConfigError("ssl/server.key", "missing");
 * assert.strictEqual(error.message, "Cannot configure TLS: ssl/server.key: missing");
 * ```
 */
export class SSLConfigError extends InputError {
  /**
   * Creates the error.
   *
   * @param file The file (or files) at fault.
   * @param problem What is wrong, and what is expected.
   * @param options The underlying error, kept as `cause`.
   */
  constructor(file: string, problem: string, options?: ErrorOptions) {
    super(`Cannot configure TLS: ${file}: ${problem}`, options);
    this.name = "SSLConfigError";
  }
}

function failed(file: string, problem: string, error: unknown): SSLConfigError {
  return new SSLConfigError(file, `${problem}: ${oneLine(error)}`, {
    cause: error,
  });
}

async function isPresent(path: string): Promise<boolean> {
  try {
    // lstat: a dangling link is present (and then unreadable), not absent.
    await Deno.lstat(path);
    return true;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return false;
    throw failed(path, "cannot stat", error);
  }
}

async function readPem(path: string): Promise<string> {
  try {
    return await Deno.readTextFile(path);
  } catch (error) {
    throw failed(path, "cannot read", error);
  }
}

function parseCertificate(
  crypto: Crypto,
  path: string,
  pem: string,
): X509Certificate {
  if (!pem.includes("-----BEGIN CERTIFICATE-----")) {
    throw new SSLConfigError(
      path,
      "not a PEM certificate (expected -----BEGIN CERTIFICATE-----)",
    );
  }
  try {
    return new crypto.X509Certificate(pem);
  } catch (error) {
    throw failed(path, "not a valid PEM certificate", error);
  }
}

function parsePrivateKey(
  crypto: Crypto,
  path: string,
  pem: string,
): KeyObject {
  if (pem.includes("-----BEGIN ENCRYPTED PRIVATE KEY-----")) {
    throw new SSLConfigError(
      path,
      "encrypted private keys are not supported; store the key unencrypted (mode 600)",
    );
  }
  if (!/-----BEGIN (RSA |EC )?PRIVATE KEY-----/.test(pem)) {
    throw new SSLConfigError(
      path,
      "not a PEM private key (expected -----BEGIN PRIVATE KEY-----)",
    );
  }
  try {
    return crypto.createPrivateKey(pem);
  } catch (error) {
    throw failed(path, "not a valid PEM private key", error);
  }
}

function warnAboutValidity(path: string, certificate: X509Certificate): void {
  const now = Date.now();
  if (Date.parse(certificate.validTo) < now) {
    log.warn(`${path}: certificate expired on ${certificate.validTo}`);
  } else if (Date.parse(certificate.validFrom) > now) {
    log.warn(`${path}: certificate not valid before ${certificate.validFrom}`);
  }
}

function warnAboutKeyLog(keyLog: string | undefined): void {
  if (keyLog !== undefined && keyLog !== "") {
    log.warn(
      "SSLKEYLOGFILE is set: TLS session keys are written to disk; unset it in production",
    );
  }
}

/**
 * The PEM certificate and key to give `Deno.serve`, read from
 * `<directory>/ssl/` and checked to belong together.
 *
 * @example Serve HTTPS when `ssl/server.crt` and `ssl/server.key` exist
 * ```ts
 * import { SSLConfig } from "@mymodel/serve/web";
 *
 * const tls = await SSLConfig.fromDirectory(Deno.cwd());
 * await using server = Deno.serve({
 *   hostname: "127.0.0.1",
 *   port: 0,
 *   onListen: () => {},
 *   ...(tls ? { cert: tls.cert, key: tls.key } : {}),
 * }, () => new Response("ok"));
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
   * Reads `<directory>/ssl/server.crt` and `<directory>/ssl/server.key`.
   *
   * @param directory The directory holding the `ssl` folder.
   * @param options `devMode` to serve `ssl/ca.crt` along.
   * @returns The configuration, or `undefined` when neither file exists.
   * @throws {SSLConfigError} When one file is missing, unreadable or not
   *   PEM, or the key does not belong to the certificate.
   *
   * @example
   * ```ts
   * import { SSLConfig } from "@mymodel/serve/web";
   * console.log(await SSLConfig.fromDirectory("/nonexistent")); // undefined
   * ```
   */
  static async fromDirectory(
    directory: string,
    options: SSLConfigOptions = {},
  ): Promise<SSLConfig | undefined> {
    const certFile = join(directory, "ssl", "server.crt");
    const keyFile = join(directory, "ssl", "server.key");
    const [hasCert, hasKey] = await Promise.all([
      isPresent(certFile),
      isPresent(keyFile),
    ]);
    if (!hasCert && !hasKey) return undefined;
    if (!hasKey || !hasCert) {
      const [missing, found] = hasKey
        ? [certFile, keyFile]
        : [keyFile, certFile];
      throw new SSLConfigError(
        missing,
        `missing (found ${found}; both files are needed for HTTPS)`,
      );
    }
    const cert = await readPem(certFile);
    const key = await readPem(keyFile);
    const crypto = await import("node:crypto");
    const certificate = parseCertificate(crypto, certFile, cert);
    const privateKey = parsePrivateKey(crypto, keyFile, key);
    const spki = { type: "spki", format: "der" } as const;
    let matches: boolean;
    try {
      matches = certificate.publicKey.export(spki).equals(
        crypto.createPublicKey(privateKey).export(spki),
      );
    } catch (error) {
      throw failed(
        `${certFile} and ${keyFile}`,
        "cannot compare the public keys",
        error,
      );
    }
    if (!matches) {
      throw new SSLConfigError(
        `${certFile} and ${keyFile}`,
        "the private key does not belong to the certificate",
      );
    }
    warnAboutValidity(certFile, certificate);

    const served = {
      cert,
      key,
      certFile,
      keyFile,
      serial: serialHex(certificate.serialNumber),
    };
    if (!options.devMode) {
      warnAboutKeyLog(options.keyLogFile);
      return new SSLConfig(served);
    }
    const caFile = join(directory, "ssl", "ca.crt");
    if (!(await isPresent(caFile))) return new SSLConfig(served);
    const ca = await readPem(caFile);
    if (!certificate.checkIssued(parseCertificate(crypto, caFile, ca))) {
      log.warn(`${certFile} was not issued by ${caFile}`);
    }
    const chain = `${cert.trimEnd()}\n${ca.trimStart()}`;
    return new SSLConfig({ ...served, cert: chain, ca, caFile });
  }
}

/** Whole bytes, as `openssl x509 -serial` prints it: `serialNumber` drops a leading zero nibble. */
function serialHex(serialNumber: string): string {
  const hex = serialNumber.toLowerCase();
  return hex.length % 2 === 1 ? `0${hex}` : hex;
}
