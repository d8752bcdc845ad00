/**
 * The status view's client: where the launcher is, whether it serves TLS,
 * and one `GET /models?detail=1`, every failure one line.
 *
 * @module
 */
import { ConfigError } from "../common/config_error.ts";
import { isWildcardHost, portIn, urlHost } from "../common/settings.ts";
import { isModelsDetail, type ModelsDetail } from "./models_detail.ts";
import { oneLine } from "../common/one_line.ts";

/** Where and how to ask the launcher; unset fields follow the launcher's own defaults. */
export interface StatusOptions {
  /** The base URL (`https://gpu-7:5000`), instead of host, port and the TLS guess. */
  url?: string;
  /** A wildcard (`0.0.0.0`, `::`) means this machine. @default {NUCLEUS_HOST, else "localhost"} */
  host?: string;
  /** The management port. @default {NUCLEUS_PORT, else 5000} */
  port?: number;
  /** The root: HTTPS when `ssl/server.crt` and `.key` are there, trusting `ssl/ca.crt`, else the certificate. @default {MY_LOCAL} */
  directory?: string;
  /** A production token. @default {NUCLEUS_TOKEN} */
  token?: string;
  /** How long the answer may take, in milliseconds. @default {10000} */
  timeoutMs?: number;
}

/**
 * The launcher could not be asked, or its answer was not the state.
 *
 * @example
 * ```ts
 * import { StatusError } from "@mymodel/serve/status";
 * const error = new StatusError("Cannot reach the launcher at http://localhost:5000: connection refused");
 * console.assert(error.name === "StatusError");
 * ```
 */
export class StatusError extends Error {
  /**
   * Creates the error.
   *
   * @param message One line: what failed and what to do.
   * @param options The underlying error, if any.
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "StatusError";
  }
}

/** Where the launcher is and what the client trusts. */
export interface Target {
  /** Without a path: `http://localhost:5000`. */
  base: string;
  /** The PEM file trusted for TLS. */
  trusted?: string;
  /** Its text. */
  caCert?: string;
}

function env(name: string): string | undefined {
  const value = Deno.env.get(name);
  return value === undefined || value === "" ? undefined : value;
}

function readIfFile(path: string): string | undefined {
  try {
    return Deno.readTextFileSync(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return undefined;
    throw new ConfigError(
      `Cannot read ${path}: ${
        (error as Error).message
      } (expected a readable PEM file)`,
      { cause: error },
    );
  }
}

/**
 * The launcher's base URL and the certificate to trust.
 *
 * @param options Where the launcher is.
 * @returns The target.
 * @throws {ConfigError} On a bad `NUCLEUS_PORT` or URL, or an unreadable certificate.
 *
 * @example
 * ```ts
 * import { resolveTarget } from "@mymodel/serve/status";
 * console.log(resolveTarget({ url: "http://gpu-7:5000" }).base); // http://gpu-7:5000
 * ```
 */
export function resolveTarget(options: StatusOptions = {}): Target {
  const directory = options.directory ?? env("MY_LOCAL");
  let trust: { trusted: string; caCert: string } | undefined;
  if (directory !== undefined) {
    const crt = readIfFile(`${directory}/ssl/server.crt`);
    if (
      crt !== undefined &&
      readIfFile(`${directory}/ssl/server.key`) !== undefined
    ) {
      const ca = readIfFile(`${directory}/ssl/ca.crt`);
      trust = ca !== undefined
        ? { trusted: `${directory}/ssl/ca.crt`, caCert: ca }
        : { trusted: `${directory}/ssl/server.crt`, caCert: crt };
    }
  }
  let base: string;
  if (options.url !== undefined) {
    let url: URL;
    try {
      url = new URL(options.url);
    } catch (cause) {
      throw new ConfigError(
        `Cannot use --url ${options.url}: not a URL (expected http(s)://host:port)`,
        { cause },
      );
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new ConfigError(
        `Cannot use --url ${options.url}: expected an http:// or https:// URL`,
      );
    }
    base = url.origin;
    if (url.protocol === "http:") trust = undefined;
  } else {
    const named = options.host ?? env("NUCLEUS_HOST") ?? "localhost";
    // A launcher bound to every interface is reached on this machine by its loopback name.
    const host = isWildcardHost(named) ? "localhost" : named;
    const text = env("NUCLEUS_PORT");
    const port = options.port ?? (text === undefined ? 5000 : portIn(text));
    if (port === undefined) {
      throw new ConfigError(
        `Cannot use NUCLEUS_PORT=${
          JSON.stringify(text)
        }: expected a port from 1 to 65535`,
      );
    }
    base = `${trust ? "https" : "http"}://${urlHost(host)}:${port}`;
  }
  return { base, ...trust };
}

function errorText(error: unknown): string {
  return `${(error as Error)?.message ?? error} ${
    ((error as Error)?.cause as Error | undefined)?.message ?? ""
  }`;
}

/** A TLS server, not a plain one. */
function isCertificateProblem(error: unknown): boolean {
  return /certificate|UnknownIssuer|NotValidForName|peer/i.test(
    errorText(error),
  );
}

function networkProblem(error: unknown, target: Target): string {
  const text = errorText(error);
  if (/connection refused|ECONNREFUSED|os error 111/i.test(text)) {
    return "connection refused (is it running? --port?)";
  }
  if (/certificate|tls|ssl|handshake|UnknownIssuer|peer/i.test(text)) {
    const trusted = target.trusted === undefined
      ? "the system's root certificates"
      : target.trusted;
    return `TLS failed: ${
      oneLine(text)
    } (trusted ${trusted}; expected the launcher's certificate to chain to it)`;
  }
  if (/dns|lookup|name or service|failed to lookup/i.test(text)) {
    return `cannot resolve the host: ${oneLine(text)} (--host?)`;
  }
  if (/invalid HTTP version/i.test(text) && target.base.startsWith("http:")) {
    // A TLS server answers a plain request with a TLS alert, not HTTP.
    const https = target.base.replace(/^http:/, "https:");
    return `the answer is not HTTP: the launcher may serve TLS (expected plain HTTP at an http:// URL; try --url ${https}, with --directory naming its root to trust its ssl/ certificate)`;
  }
  return oneLine(text);
}

const PLAIN_LOOK_MS = 2_000;

/** A TLS handshake with a plain server fails, or hangs until the timeout, saying nothing of why. */
async function answersPlainHttp(base: string): Promise<boolean> {
  const url = new URL(base);
  url.protocol = "http:";
  try {
    const response = await fetch(`${url.origin}/health`, {
      signal: AbortSignal.timeout(PLAIN_LOOK_MS),
    });
    await response.body?.cancel();
    return true;
  } catch {
    return false;
  }
}

function plainHttpProblem(base: string): string {
  const http = base.replace(/^https:/, "http:");
  return `TLS failed: it answers plain HTTP (expected TLS at an https:// URL; try --url ${http}, or give the launcher its certificate pair in <directory>/ssl/)`;
}

/**
 * `GET /models?detail=1`, the answer as received.
 *
 * @param options Where the launcher is.
 * @returns The answer.
 * @throws {StatusError} When it cannot be asked or answers something else.
 * @throws {ConfigError} When the options or the environment cannot be used.
 *
 * @example
 * ```ts
 * import { fetchDetail } from "@mymodel/serve/status";
 * const detail = await fetchDetail({ port: 5000 }).catch(() => undefined);
 * console.log(Object.keys(detail?.active ?? {}));
 * ```
 */
export async function fetchDetail(
  options: StatusOptions = {},
): Promise<ModelsDetail> {
  const target = resolveTarget(options);
  const token = options.token ?? env("NUCLEUS_TOKEN");
  const client = target.caCert === undefined
    ? undefined
    : Deno.createHttpClient({ caCerts: [target.caCert] });
  const timeoutMs = options.timeoutMs ?? 10_000;
  const url = `${target.base}/models?detail=1`;
  // A handshake still pending after a while: look whether plain HTTP answers
  // there, and if so stop waiting for the handshake.
  const plain = new AbortController();
  let look: Promise<boolean> | undefined;
  const lookTimer = target.base.startsWith("https:")
    ? setTimeout(() => {
      look = answersPlainHttp(target.base).then((yes) => {
        if (yes) plain.abort();
        return yes;
      });
    }, PLAIN_LOOK_MS)
    : undefined;
  try {
    let response: Response;
    try {
      response = await fetch(url, {
        headers: token === undefined
          ? {}
          : { authorization: `Bearer ${token}` },
        signal: AbortSignal.any([
          AbortSignal.timeout(timeoutMs),
          plain.signal,
        ]),
        ...(client === undefined ? {} : { client }),
      });
    } catch (error) {
      clearTimeout(lookTimer);
      const tlsToPlain = lookTimer !== undefined &&
        !isCertificateProblem(error) &&
        await (look ?? answersPlainHttp(target.base));
      const detail = tlsToPlain
        ? plainHttpProblem(target.base)
        : (error as Error)?.name === "TimeoutError"
        ? `no answer within ${
          timeoutMs / 1000
        } s (expected /models to answer in about 2 s)`
        : networkProblem(error, target);
      throw new StatusError(
        `Cannot reach the launcher at ${target.base}: ${detail}`,
        { cause: error },
      );
    }
    const text = await response.text();
    const cannot = (detail: string, options?: ErrorOptions) =>
      new StatusError(
        `Cannot read the launcher's state at ${target.base}: ${detail}`,
        options,
      );
    if (response.status === 401) {
      throw cannot(
        token === undefined
          ? "it answered 401: set NUCLEUS_TOKEN or --token-file"
          : "it answered 401 to the token given (expected a valid, unexpired token for its IDP_SECRET and IDP_ISSUER)",
      );
    }
    if (response.status !== 200) {
      throw cannot(
        `it answered ${response.status} (expected 200 from GET /models?detail=1; is this the launcher?)`,
      );
    }
    const expected = "(expected the launcher's /models answer)";
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch (cause) {
      throw cannot(`the answer is not JSON ${expected}`, { cause });
    }
    if (!isModelsDetail(body)) {
      throw cannot(`the answer has no 'active' mapping ${expected}`);
    }
    return body;
  } finally {
    clearTimeout(lookTimer);
    await look;
    client?.close();
  }
}
