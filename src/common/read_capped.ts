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

/** A file's text; `not` what it is instead of a regular file; `text` undefined past `maxBytes` (`size` when its stat said so). */
export type FileRead =
  | { readonly text: string }
  | { readonly not: string }
  | { readonly text: undefined; readonly size?: number };

/**
 * A regular file's text, up to `maxBytes`, read without blocking the event
 * loop. Checked before the open: opening a FIFO blocks until a writer comes,
 * and a device may never end. `signal` closes a read that hangs (a stalled disk).
 *
 * @example
 * ```ts
 * import { readFileCapped } from "./read_capped.ts";
 *
 * const read = await readFileCapped("/etc/hostname", 4096);
 * if ("not" in read) console.log(`it is ${read.not}`);
 * ```
 * @throws The stat's or the open's error (`Deno.errors.NotFound` …).
 */
export async function readFileCapped(
  path: string | URL,
  maxBytes: number,
  signal?: AbortSignal,
): Promise<FileRead> {
  const info = await Deno.stat(path);
  if (!info.isFile) return { not: kindOf(info) };
  if (info.size > maxBytes) return { text: undefined, size: info.size };
  const opened = await Deno.open(path);
  const close = () => {
    try {
      opened.close();
    } catch { /* the read had ended and closed it */ }
  };
  signal?.addEventListener("abort", close, { once: true });
  try {
    // Capped again: the file may grow while it is read (/proc files say 0).
    return { text: await readCapped(opened.readable, maxBytes) };
  } finally {
    signal?.removeEventListener("abort", close);
  }
}

function kindOf(info: Deno.FileInfo): string {
  if (info.isDirectory) return "a directory";
  if (info.isFifo) return "a FIFO";
  if (info.isCharDevice) return "a character device";
  if (info.isBlockDevice) return "a block device";
  if (info.isSocket) return "a socket";
  return "not a regular file";
}
