// One read of an engine's own `/metrics`, the way every reader of traffic
// does it (a drain now, the health round's traffic later): the engine's API
// key, a cleared timer, the body capped at METRICS_MAX_BYTES.
import { isWildcardHost, urlHost } from "../common/settings.ts";
import type { TrafficRule } from "./kinds/engine_kind.ts";
import { METRICS_MAX_BYTES } from "./prometheus_text.ts";
import { readTraffic, type TrafficReading } from "./traffic.ts";

/** Where the launcher reaches an engine bound to `host`: a wildcard is this machine. */
export function engineOrigin(host: string, port: number): string {
  const reach = isWildcardHost(host)
    ? (host.includes(":") ? "[::1]" : "127.0.0.1")
    : urlHost(host);
  return `http://${reach}:${port}`;
}

/** The engine's running and waiting requests and token counters; null when unreadable (refused, late, not 200, too large, families missing). */
export async function readEngineTraffic(
  origin: string,
  rule: TrafficRule,
  apiKey: string,
  timeoutMs: number,
): Promise<TrafficReading | null> {
  // A cleared timer, not AbortSignal.timeout() (see ServerProcess's poll).
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), timeoutMs);
  try {
    const response = await fetch(`${origin}${rule.path}`, {
      headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {},
      signal: abort.signal,
    });
    if (!response.ok || !response.body) {
      await response.body?.cancel();
      return null;
    }
    const decoder = new TextDecoder();
    let text = "";
    let size = 0;
    for await (const chunk of response.body) {
      size += chunk.length;
      if (size > METRICS_MAX_BYTES) return null; // the loop's exit cancels the body
      text += decoder.decode(chunk, { stream: true });
    }
    return readTraffic(text + decoder.decode(), rule, Date.now());
  } catch {
    return null;
  } finally {
    clearTimeout(timer);
  }
}
