/**
 * The catalogue Worker: one `Registry.load` off the event loop that serves
 * the management API, so that a reload's YAML parse never holds a request.
 * It answers one {@linkcode LoadRequest} with one {@linkcode LoadReply}, then
 * ends. Started by `worker_load.ts`; not imported by anything.
 *
 * @module
 */
import { Registry } from "./registry.ts";
import { errorData, type LoadReply, type LoadRequest } from "./load_message.ts";

/** The worker's global scope, as far as this module uses it. */
const scope = self as unknown as {
  onmessage: ((event: MessageEvent<LoadRequest>) => void) | null;
  postMessage(message: LoadReply): void;
  close(): void;
};

scope.onmessage = async ({ data }) => {
  let reply: LoadReply;
  try {
    const source = data.url ? new URL(data.source) : data.source;
    const registry = await Registry.load(source, data.options);
    reply = { ok: true, parsed: registry.toParsed() };
  } catch (error) {
    reply = { ok: false, error: errorData(error) };
  }
  scope.postMessage(reply);
  scope.close();
};
