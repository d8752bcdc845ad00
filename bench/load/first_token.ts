/**
 * Time to first token as a client feels it: one streamed chat completion sent
 * straight to an engine's port (the launcher has no inference endpoint), timed
 * from the send to the first chunk whose `delta.content` is not empty (an
 * OpenAI-style server sends a role-only chunk first, before any token). Works
 * for llama-server, vLLM and the stand-in engine alike.
 *
 * @module
 */
import { HOST, sleep } from "../plan.ts";

/** One streamed request, as the client saw it. */
export interface FirstToken {
  /** Send (or `since`) to the first chunk with content, in ms; NaN when none came. */
  ms: number;
  /** Chunks with content (a plain answer with content: 1). */
  tokens: number;
  /** The HTTP status; 0 when no response came. */
  status: number;
  /** 200, at least one token, and the stream ended with `data: [DONE]`. */
  ok: boolean;
  /** Why not `ok`. */
  error?: string;
}

/** What to send, and how. */
export interface ChatOptions {
  /** Bearer token of the engine. */
  key?: string;
  /** The user message; vary it to keep a server's prompt cache out of the figure. */
  prompt?: string;
  /**
   * `max_tokens`.
   * @default {8}
   */
  maxTokens?: number;
  /** More body fields (e.g. `logit_bias`). */
  extra?: Record<string, unknown>;
  /**
   * `stream`: false sends a plain request, whose first token is its whole
   * answer (a server sends nothing before it has generated all of it).
   * @default {true}
   */
  stream?: boolean;
  client?: Deno.HttpClient;
  /**
   * The whole request's limit.
   * @default {60000}
   */
  timeoutMs?: number;
}

/** The tokens in one SSE event's JSON (`choices[0].delta.content`), or `[DONE]`. */
function eventContent(data: string): "done" | string {
  if (data === "[DONE]") return "done";
  try {
    const chunk = JSON.parse(data) as {
      choices?: { delta?: { content?: unknown } }[];
    };
    const content = chunk.choices?.[0]?.delta?.content;
    return typeof content === "string" ? content : "";
  } catch {
    return "";
  }
}

/**
 * One streamed chat completion to the engine on `port`, timed from `since`
 * (a `performance.now()` value; the send by default) to its first token.
 *
 * @example
 * ```ts ignore
 * const { ms, ok } = await firstToken(8001, { maxTokens: 4 });
 * ```
 */
export async function firstToken(
  port: number,
  options: ChatOptions = {},
  since = performance.now(),
): Promise<FirstToken> {
  const out: FirstToken = { ms: Number.NaN, tokens: 0, status: 0, ok: false };
  let done = false;
  try {
    const response = await fetch(`http://${HOST}:${port}/v1/chat/completions`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        ...(options.key ? { authorization: `Bearer ${options.key}` } : {}),
      },
      body: JSON.stringify({
        messages: [{ role: "user", content: options.prompt ?? "hello" }],
        max_tokens: options.maxTokens ?? 8,
        stream: options.stream ?? true,
        ...options.extra,
      }),
      signal: AbortSignal.timeout(options.timeoutMs ?? 60_000),
      ...(options.client ? { client: options.client } : {}),
    });
    out.status = response.status;
    if (!response.ok || !response.body) {
      await response.body?.cancel();
      out.error = `status ${response.status}`;
      return out;
    }
    if (options.stream === false) return await whole(response, out, since);
    let rest = "";
    for await (
      const text of response.body.pipeThrough(new TextDecoderStream())
    ) {
      const at = performance.now();
      const events = (rest + text).split("\n\n");
      rest = events.pop() ?? "";
      for (const event of events) {
        const data = /^data: ?(.*)$/m.exec(event)?.[1];
        if (data === undefined) continue;
        const content = eventContent(data.trim());
        if (content === "done") done = true;
        else if (content) {
          if (out.tokens++ === 0) out.ms = at - since;
        }
      }
    }
  } catch (error) {
    // fetch's own message is "fetch failed"; the socket's is its cause's.
    const cause = error instanceof Error && error.cause instanceof Error
      ? `: ${error.cause.message}`
      : "";
    out.error = `${error instanceof Error ? error.message : error}${cause}`;
    return out;
  }
  out.ok = done && out.tokens > 0;
  if (!out.ok) {
    out.error = out.tokens ? "no [DONE]" : "no token in the stream";
  }
  return out;
}

/** A plain (not streamed) answer: its first token comes with its last. */
async function whole(
  response: Response,
  out: FirstToken,
  since: number,
): Promise<FirstToken> {
  const body = await response.json() as {
    choices?: { message?: { content?: unknown }; text?: unknown }[];
  };
  out.ms = performance.now() - since;
  const choice = body.choices?.[0];
  const content = choice?.message?.content ?? choice?.text;
  out.tokens = typeof content === "string" && content ? 1 : 0;
  out.ok = out.tokens > 0;
  if (!out.ok) out.error = "no content in the answer";
  return out;
}

/** {@linkcode firstToken} of a server that is still starting, and what it took. */
export interface FirstTokenFromStart extends FirstToken {
  /** Sends refused (nothing listening yet). */
  refused: number;
  /** Answers 503 (listening, model still loading). */
  unavailable: number;
}

/**
 * The first token from an engine that is still starting: the request is
 * sent again every `retryMs` while the port refuses it or answers 503 (a
 * model loading), as a client waiting for a model it just asked for would;
 * timed from `since` (e.g. the launcher's spawn).
 *
 * @throws {Error} When no answer but a refusal or 503 came by `deadlineMs` after `since`.
 * @example
 * ```ts ignore
 * const spawnedAt = performance.now();
 * // … spawn a launcher serving its engine on 8001 …
 * const { ms, unavailable } = await firstTokenFromStart(8001, spawnedAt);
 * ```
 */
export async function firstTokenFromStart(
  port: number,
  since: number,
  options: ChatOptions & { retryMs?: number; deadlineMs?: number } = {},
): Promise<FirstTokenFromStart> {
  const deadline = since + (options.deadlineMs ?? 120_000);
  let [refused, unavailable] = [0, 0];
  while (performance.now() < deadline) {
    const got = await firstToken(port, options, since);
    if (got.status === 503) unavailable++;
    else if (got.status === 0 && /refused/i.test(got.error ?? "")) refused++;
    else return { ...got, refused, unavailable };
    await sleep(options.retryMs ?? 25);
  }
  throw new Error(
    `Cannot get a first token from port ${port}: refused ${refused} and 503 ${unavailable} times in ${
      options.deadlineMs ?? 120_000
    } ms`,
  );
}
