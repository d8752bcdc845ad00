// What the launcher asks a running engine besides `/health`: its metrics, its
// sleep, a canary request. Each is bounded in time (a cleared timer) and in
// bytes (the body read in chunks, cancelled past the cap), and sends the
// engine's API key when it has one: llama-server guards `/metrics` and `/props`
// with it (tools/server/server.cpp, `public_endpoints`).
import { isWildcardHost, urlHost } from "../common/settings.ts";

/** An answer read whole, or why not (`answered 404`, `timed out after 2 s` …). */
export type EngineAnswer =
  | { readonly ok: true; readonly status: number; readonly text: string }
  | { readonly ok: false; readonly status?: number; readonly why: string };

/** The engine's address as the launcher reaches it (a wildcard bind through loopback). */
export function engineOrigin(host: string, port: number): string {
  const to = isWildcardHost(host)
    ? (host.includes(":") ? "[::1]" : "127.0.0.1")
    : urlHost(host);
  return `http://${to}:${port}`;
}

/** GET (or POST `body` as JSON) `url`; an answer over `maxBytes` or `timeoutMs` is a failure. */
export async function askEngine(
  url: string,
  o: {
    apiKey: string;
    timeoutMs: number;
    maxBytes: number;
    body?: unknown;
    signal?: AbortSignal;
  },
): Promise<EngineAnswer> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), o.timeoutMs);
  const stop = () => abort.abort();
  o.signal?.addEventListener("abort", stop, { once: true });
  const headers: Record<string, string> = o.apiKey
    ? { authorization: `Bearer ${o.apiKey}` }
    : {};
  if (o.body !== undefined) headers["content-type"] = "application/json";
  try {
    const response = await fetch(url, {
      signal: abort.signal,
      headers,
      ...o.body === undefined
        ? {}
        : { method: "POST", body: JSON.stringify(o.body) },
    });
    const reader = response.body?.getReader();
    const decoder = new TextDecoder();
    let text = "";
    let bytes = 0;
    for (let part = await reader?.read(); part && !part.done;) {
      bytes += part.value.length;
      if (bytes > o.maxBytes) {
        await reader!.cancel();
        return {
          ok: false,
          status: response.status,
          why: `its answer passed ${o.maxBytes} bytes`,
        };
      }
      text += decoder.decode(part.value, { stream: true });
      part = await reader!.read();
    }
    if (response.status !== 200) {
      return {
        ok: false,
        status: response.status,
        why: `answered ${response.status}`,
      };
    }
    return { ok: true, status: 200, text: text + decoder.decode() };
  } catch (error) {
    return {
      ok: false,
      why: abort.signal.aborted
        ? `no answer within ${o.timeoutMs / 1000} s`
        : (error as Error).message.split("\n")[0]!,
    };
  } finally {
    clearTimeout(timer);
    o.signal?.removeEventListener("abort", stop);
  }
}
