import { ConfigError } from "../common/config_error.ts";
import { isWildcardHost, portIn, urlHost } from "../common/settings.ts";
import { oneLine } from "../common/one_line.ts";
import type { ModelsDetail } from "./table.ts";

/** Unset fields follow the launcher's own variables and defaults; `url` replaces host, port and the TLS guess. */
export interface StatusOptions {
  url?: string | undefined;
  host?: string | undefined;
  port?: number | undefined;
  directory?: string | undefined;
  token?: string | undefined;
}

/** `base` is `http://localhost:5000`; `trusted` names the PEM file `caCert` was read from. */
interface Target {
  base: string;
  trusted?: string;
  caCert?: string;
}

function env(name: string): string | undefined {
  return Deno.env.get(name) || undefined;
}

/** `what` names the file in a message; a missing one is undefined when `optional`. */
function readText(
  path: string,
  what: string,
  expected: string,
  optional = false,
): string | undefined {
  try {
    return Deno.readTextFileSync(path);
  } catch (error) {
    if (optional && error instanceof Deno.errors.NotFound) return undefined;
    throw new ConfigError(
      `Cannot read ${what}: ${(error as Error).message} (expected ${expected})`,
      { cause: error },
    );
  }
}

/** The `--token-file`'s token, else `NUCLEUS_TOKEN`; read once, before asking. */
export function readToken(path: string | undefined): string | undefined {
  if (path === undefined) return env("NUCLEUS_TOKEN");
  const what = `--token-file ${path}`;
  const text = readText(path, what, "a readable file holding the token")!;
  const token = text.replace(/\r?\n$/, "");
  if (token.trim() === "") {
    throw new ConfigError(
      `Cannot use --token-file ${path}: the file is empty (expected the token)`,
    );
  }
  return token;
}

function trustIn(directory: string | undefined): Omit<Target, "base"> {
  if (directory === undefined) return {};
  const ssl = `${directory}/ssl`;
  const pem = (name: string) =>
    readText(`${ssl}/${name}`, `${ssl}/${name}`, "a readable PEM file", true);
  const crt = pem("server.crt");
  if (crt === undefined || pem("server.key") === undefined) return {};
  const ca = pem("ca.crt");
  return ca !== undefined
    ? { trusted: `${ssl}/ca.crt`, caCert: ca }
    : { trusted: `${ssl}/server.crt`, caCert: crt };
}

function resolveTarget(options: StatusOptions): Target {
  const trust = trustIn(options.directory ?? env("MY_LOCAL"));
  if (options.url !== undefined) {
    const url = URL.parse(options.url);
    if (url?.protocol !== "http:" && url?.protocol !== "https:") {
      const why = url === null
        ? "not a URL (expected http(s)://host:port)"
        : "expected an http:// or https:// URL";
      throw new ConfigError(`Cannot use --url ${options.url}: ${why}`);
    }
    return { base: url.origin, ...(url.protocol === "https:" ? trust : {}) };
  }
  const named = options.host ?? env("NUCLEUS_HOST") ?? "localhost";
  // A launcher bound to every interface is reached on this machine by its loopback name.
  const host = isWildcardHost(named) ? "localhost" : named;
  const text = env("NUCLEUS_PORT");
  const port = options.port ?? (text === undefined ? 5000 : portIn(text));
  if (port === undefined) {
    const quoted = JSON.stringify(text);
    throw new ConfigError(
      `Cannot use NUCLEUS_PORT=${quoted}: expected a port from 1 to 65535`,
    );
  }
  const scheme = trust.caCert === undefined ? "http" : "https";
  return { base: `${scheme}://${urlHost(host)}:${port}`, ...trust };
}

const PLAIN_LOOK_MS = 2_000;
const TIMEOUT_MS = 10_000;

/** Why the launcher could not be reached; `answersPlainHttp` looks once. */
async function reachProblem(
  error: unknown,
  target: Target,
  answersPlainHttp: () => Promise<boolean>,
): Promise<string> {
  const cause = (error as Error)?.cause as Error | undefined;
  const text = `${(error as Error)?.message ?? error} ${cause?.message ?? ""}`;
  const https = target.base.startsWith("https:");
  // A certificate problem proves a TLS server: no need to look.
  if (
    https && !/certificate|UnknownIssuer|NotValidForName|peer/i.test(text) &&
    await answersPlainHttp()
  ) {
    const http = target.base.replace(/^https:/, "http:");
    return `TLS failed: it answers plain HTTP (expected TLS at an https:// URL; try --url ${http}, or give the launcher its certificate pair in <directory>/ssl/)`;
  }
  const s = TIMEOUT_MS / 1000;
  if ((error as Error)?.name === "TimeoutError") {
    return `no answer within ${s} s (expected /models to answer in about 2 s)`;
  }
  if (/connection refused|ECONNREFUSED|os error 111/i.test(text)) {
    return "connection refused (is it running? --port?)";
  }
  if (/certificate|tls|ssl|handshake|UnknownIssuer|peer/i.test(text)) {
    const trusted = target.trusted ?? "the system's root certificates";
    const why = oneLine(text);
    return `TLS failed: ${why} (trusted ${trusted}; expected the launcher's certificate to chain to it)`;
  }
  if (/dns|lookup|name or service|failed to lookup/i.test(text)) {
    return `cannot resolve the host: ${oneLine(text)} (--host?)`;
  }
  if (!https && /invalid HTTP version/i.test(text)) {
    // A TLS server answers a plain request with a TLS alert, not HTTP.
    const https = target.base.replace(/^http:/, "https:");
    return `the answer is not HTTP: the launcher may serve TLS (expected plain HTTP at an http:// URL; try --url ${https}, with --directory naming its root to trust its ssl/ certificate)`;
  }
  return oneLine(text);
}

async function ask(
  target: Target,
  token: string | undefined,
): Promise<{ status: number; text: string }> {
  using client = target.caCert === undefined
    ? undefined
    : Deno.createHttpClient({ caCerts: [target.caCert] });
  // A TLS handshake with a plain server fails, or hangs until the timeout,
  // saying nothing of why: after a while, or when it fails, look whether plain
  // HTTP answers there, and if so stop waiting for the handshake.
  const plain = new AbortController();
  let look: Promise<boolean> | undefined;
  const lookAtPlain = () =>
    look ??= fetch(`${target.base.replace(/^https:/, "http:")}/health`, {
      signal: AbortSignal.timeout(PLAIN_LOOK_MS),
    }).then((response) => response.body?.cancel()).then(() => {
      plain.abort();
      return true;
    }, () => false);
  const timer = target.base.startsWith("https:")
    ? setTimeout(lookAtPlain, PLAIN_LOOK_MS)
    : undefined;
  try {
    const response = await fetch(`${target.base}/models?detail=1`, {
      headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
      signal: AbortSignal.any([AbortSignal.timeout(TIMEOUT_MS), plain.signal]),
      ...(client === undefined ? {} : { client }),
    }).catch(async (cause) => {
      const problem = await reachProblem(cause, target, lookAtPlain);
      const message = `Cannot reach the launcher at ${target.base}: ${problem}`;
      throw new Error(message, { cause });
    });
    return { status: response.status, text: await response.text() };
  } finally {
    clearTimeout(timer);
    await look;
  }
}

export async function fetchDetail(
  options: StatusOptions,
): Promise<ModelsDetail> {
  const target = resolveTarget(options);
  const { status, text } = await ask(target, options.token);
  const cannot = (detail: string) =>
    new Error(`Cannot read the launcher's state at ${target.base}: ${detail}`);
  if (status === 401) {
    throw cannot(
      options.token === undefined
        ? "it answered 401: set NUCLEUS_TOKEN or --token-file"
        : "it answered 401 to the token given (expected a valid, unexpired token for its IDP_SECRET and IDP_ISSUER)",
    );
  }
  if (status !== 200) {
    throw cannot(
      `it answered ${status} (expected 200 from GET /models?detail=1; is this the launcher?)`,
    );
  }
  const expected = "(expected the launcher's /models answer)";
  let body: { active?: unknown } | null;
  try {
    body = JSON.parse(text);
  } catch {
    throw cannot(`the answer is not JSON ${expected}`);
  }
  const active = body?.active;
  if (typeof active !== "object" || active === null || Array.isArray(active)) {
    throw cannot(`the answer has no 'active' mapping ${expected}`);
  }
  return body as ModelsDetail;
}
