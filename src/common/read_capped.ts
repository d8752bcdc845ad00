/** `stream`'s text, or undefined once it passes `maxBytes`: the rest is cancelled unread, so a body that never ends grows nothing. */
export async function readCapped(
  stream: ReadableStream<Uint8Array>,
  maxBytes: number,
): Promise<string | undefined> {
  const decoder = new TextDecoder();
  let text = "";
  let size = 0;
  for await (const chunk of stream) {
    size += chunk.length;
    // Leaving the loop cancels the stream.
    if (size > maxBytes) return undefined;
    text += decoder.decode(chunk, { stream: true });
  }
  return text + decoder.decode();
}
