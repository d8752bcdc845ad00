/**
 * A streamed chat completion straight to an engine, as the drain tests and
 * the drain bench (bench/phases/drain.ts) send it to the stand-in engine
 * (tests/fixtures/fake_engine.ts), whose tokens read ` t0`, ` t1`, ….
 */

/** A stream under way. */
export interface ChatStream {
  /** Tokens received so far. */
  tokens: number;
  /** Resolves with the whole body once the stream ends (cut or whole). */
  done: Promise<{ text: string; endedAt: number }>;
}

/** A streamed chat completion straight to the engine on `port` (with `key`, as its API key). */
export function chatStream(port: number, key?: string): ChatStream {
  const out: ChatStream = { tokens: 0, done: undefined as never };
  out.done = (async () => {
    let text = "";
    try {
      const response = await fetch(
        `http://127.0.0.1:${port}/v1/chat/completions`,
        {
          method: "POST",
          headers: key ? { authorization: `Bearer ${key}` } : {},
          body: JSON.stringify({
            messages: [{ role: "user", content: "one two" }],
            stream: true,
          }),
        },
      );
      const decoder = new TextDecoder();
      for await (const chunk of response.body!) {
        text += decoder.decode(chunk, { stream: true });
        out.tokens = streamTokens(text);
      }
    } catch {
      // Cut: the engine died mid-stream.
    }
    return { text, endedAt: Date.now() };
  })();
  return out;
}

/** Tokens in a stream's body (each chunk says its token twice: `delta` and `message`). */
function streamTokens(text: string): number {
  return text.match(/"delta":\{"content":" t\d+"/g)?.length ?? 0;
}

/** Whether a stream's body has all its `tokens` and ends with `[DONE]`. */
export function streamWhole(text: string, tokens: number): boolean {
  return streamTokens(text) === tokens && text.includes("data: [DONE]");
}
