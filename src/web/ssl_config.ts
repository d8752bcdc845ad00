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
import { log } from "../common/log.ts";
import { oneLine } from "../common/one_line.ts";
import { InputError } from "../common/config_error.ts";

type Crypto = typeof import("node:crypto");

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
    super(
      `Cannot configure TLS: ${file}: ${
        cause === undefined ? problem : `${problem}: ${oneLine(cause)}`
      }`,
      { cause },
    );
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
    throw new SSLConfigError(path, "not a valid PEM certificate", error);
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
    throw new SSLConfigError(path, "not a valid PEM private key", error);
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
    const crypto = await import("node:crypto");
    const certificate = parseCertificate(crypto, certFile, cert);
    if (!certificate.checkPrivateKey(parsePrivateKey(crypto, keyFile, key))) {
      throw new SSLConfigError(
        `${certFile} and ${keyFile}`,
        "the private key does not belong to the certificate",
      );
    }
    const now = Date.now();
    if (Date.parse(certificate.validTo) < now) {
      log.warn(`${certFile}: certificate expired on ${certificate.validTo}`);
    } else if (Date.parse(certificate.validFrom) > now) {
      log.warn(
        `${certFile}: certificate not valid before ${certificate.validFrom}`,
      );
    }
    // Whole bytes, as `openssl x509 -serial` prints it: `serialNumber` drops a leading zero nibble.
    const hex = certificate.serialNumber.toLowerCase();
    const serial = hex.length % 2 === 1 ? `0${hex}` : hex;
    const served = { cert, key, certFile, keyFile, serial };
    if (!options.devMode) {
      if (options.keyLogFile) {
        log.warn(
          "SSLKEYLOGFILE is set: TLS session keys are written to disk; unset it in production",
        );
      }
      return new SSLConfig(served);
    }
    const caFile = join(directory, "ssl", "ca.crt");
    const ca = await readPem(caFile);
    if (ca === undefined) return new SSLConfig(served);
    if (!certificate.checkIssued(parseCertificate(crypto, caFile, ca))) {
      log.warn(`${certFile} was not issued by ${caFile}`);
    }
    const chain = `${cert.trimEnd()}\n${ca.trimStart()}`;
    return new SSLConfig({ ...served, cert: chain, ca, caFile });
  }
}
