// What the launcher asks a running engine besides `/health` (a drain, the
// health round's traffic, sleep and canary): with the engine's API key
// (llama-server guards `/metrics`, `/props` and `/slots` with it), the body
// capped.
import { isWildcardHost, urlHost } from "../common/settings.ts";
import { readCapped } from "../common/read_capped.ts";
import { clip } from "../common/one_line.ts";
import { printable } from "../common/printable.ts";
import { abortAfter } from "../common/sleep.ts";
import type { RequestView, TrafficRule } from "./kinds/engine_kind.ts";
import { readTraffic, type TrafficReading } from "./traffic.ts";

/** vLLM's `/metrics` is about 100 KB per engine. */
export const METRICS_MAX_BYTES = 4 * 1024 * 1024;

/** A wildcard `host` is this machine. */
export function engineOrigin(host: string, port: number): string {
  const reach = isWildcardHost(host)
    ? (host.includes(":") ? "[::1]" : "127.0.0.1")
    : urlHost(host);
  return `http://${reach}:${port}`;
}

/** `why`: `answered 404`, `no answer within 2 s` … */
export type EngineAnswer =
  | { readonly ok: true; readonly status: number; readonly text: string }
  | { readonly ok: false; readonly status?: number; readonly why: string };

/** GET, or POST `body` as JSON; past `maxBytes` or `timeoutMs` it is a failure. */
export async function askEngine(
  url: string,
  o: {
    apiKey: string;
    timeoutMs: number;
    maxBytes: number;
    body?: unknown;
    /** A `POST` with no body (vLLM's `/sleep`, `/wake_up`). */
    post?: boolean;
    signal?: AbortSignal;
  },
): Promise<EngineAnswer> {
  const abort = abortAfter(o.timeoutMs, o.signal);
  const headers: Record<string, string> = o.apiKey
    ? { authorization: `Bearer ${o.apiKey}` }
    : {};
  if (o.body !== undefined) headers["content-type"] = "application/json";
  try {
    const response = await fetch(url, {
      signal: abort.signal,
      headers,
      ...o.body !== undefined
        ? { method: "POST", body: JSON.stringify(o.body) }
        : o.post
        ? { method: "POST" }
        : {},
    });
    const status = response.status;
    if (!response.ok) {
      const said = response.body
        ? engineMessage(await readCapped(response.body, 4096) ?? "")
        : "";
      const why = `answered ${status}${said && `: ${said}`}`;
      return { ok: false, status, why };
    }
    const text = response.body
      ? await readCapped(response.body, o.maxBytes)
      : "";
    return text === undefined
      ? { ok: false, status, why: `its answer passed ${o.maxBytes} bytes` }
      : { ok: true, status, text };
  } catch (error) {
    const why = abort.signal.aborted
      ? `no answer within ${o.timeoutMs / 1000} s`
      : (error as Error).message.split("\n")[0]!;
    return { ok: false, why };
  } finally {
    abort.clear();
  }
}

/** An error body's own words: OpenAI-style `{"error": {"message"}}` (llama-server, vLLM), else its text; one line, printable. */
function engineMessage(text: string): string {
  let said: unknown = text;
  try {
    const body = JSON.parse(text);
    said = body?.error?.message ?? body?.error ?? body?.message ?? text;
  } catch {
    // Not JSON: the text itself.
  }
  return clip(printable(typeof said === "string" ? said : text)).trim();
}

/** Null when unreadable (refused, late, not 200, too large, families missing). */
export async function readEngineTraffic(
  origin: string,
  rule: TrafficRule,
  apiKey: string,
  timeoutMs: number,
): Promise<TrafficReading | null> {
  const o = { apiKey, timeoutMs, maxBytes: METRICS_MAX_BYTES };
  const answer = await askEngine(`${origin}${rule.path}`, o);
  return answer.ok ? readTraffic(answer.text, rule, performance.now()) : null;
}

/** The ids of the requests the engine processes now, from its own view; null when unreadable. */
export async function readEngineRequests(
  origin: string,
  view: RequestView,
  apiKey: string,
  timeoutMs: number,
): Promise<number[] | null> {
  const o = { apiKey, timeoutMs, maxBytes: METRICS_MAX_BYTES };
  const answer = await askEngine(`${origin}${view.path}`, o);
  if (!answer.ok) return null;
  try {
    return view.processing(JSON.parse(answer.text));
  } catch {
    return null;
  }
}
