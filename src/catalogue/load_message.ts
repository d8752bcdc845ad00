/**
 * What crosses the boundary of the catalogue Worker (`catalogue_worker.ts`):
 * the request, the reply, and the refusal as plain data, so that an error
 * thrown in the worker is thrown again on the main side as the same class,
 * with the same message and fields.
 *
 * @module
 */
import { CatalogueError, KeyError } from "./catalogue_error.ts";
import { UnsetVariableError } from "./card_expand.ts";
import type { LoadOptions, ParsedCatalogue } from "./registry.ts";

/** What the main side asks: one `Registry.load` (a URL goes as its href: URLs do not clone). */
export interface LoadRequest {
  /** A file path, or a URL's href. */
  source: string;
  /** Whether `source` is a URL's href. */
  url: boolean;
  /** `Registry.load`'s options. */
  options: LoadOptions;
}

/** An error as plain data: its class by name, its message, stack, fields and cause. */
export interface ErrorData {
  name: string;
  message: string;
  stack: string | undefined;
  /** The error's own fields (`file`, `card`, `line`, `model`, …). */
  fields: Record<string, unknown>;
  cause: ErrorData | undefined;
}

/** The worker's one answer. */
export type LoadReply =
  | { ok: true; parsed: ParsedCatalogue }
  | { ok: false; error: ErrorData };

/**
 * An error as plain data; its cause too, as far as it goes (a cause of any
 * kind, a YAML node included, becomes its message: it may not clone).
 *
 * @example
 * ```ts ignore
 * errorData(new Error("x")).message; // "x"
 * ```
 */
export function errorData(error: unknown): ErrorData {
  if (!(error instanceof Error)) {
    return {
      name: "Error",
      message: String(error),
      stack: undefined,
      fields: {},
      cause: undefined,
    };
  }
  const fields: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(error)) {
    if (key === "name" || key === "message" || key === "stack") continue;
    if (key === "cause") continue;
    // Own fields are strings, numbers and lists of names; anything else stays behind.
    if (isPlain(value)) fields[key] = value;
  }
  return {
    name: error.name,
    message: error.message,
    stack: error.stack,
    fields,
    cause: error.cause === undefined ? undefined : errorData(error.cause),
  };
}

/**
 * The error again, of its own class where the catalogue has one
 * (`CatalogueError`, `KeyError`, `UnsetVariableError`), else an `Error`
 * carrying the name: the message, stack and fields as they were thrown.
 *
 * @example
 * ```ts ignore
 * revivedError(errorData(new CatalogueError("a.yaml", "bad"))) instanceof CatalogueError; // true
 * ```
 */
export function revivedError(data: ErrorData): Error {
  const f = data.fields;
  const cause = data.cause === undefined
    ? {}
    : { cause: revivedError(data.cause) };
  let error: Error;
  switch (data.name) {
    case "CatalogueError":
      error = new CatalogueError(String(f.file), "", {
        card: f.card as string | undefined,
        field: f.field as string | undefined,
        line: f.line as number | undefined,
        ...cause,
      });
      break;
    case "KeyError":
      error = new KeyError(String(f.model), [], {
        ...(typeof f.catalogue === "string" ? { catalogue: f.catalogue } : {}),
        ...cause,
      });
      break;
    case "UnsetVariableError":
      error = new UnsetVariableError(
        String(f.file),
        String(f.card),
        { field: String(f.field), line: Number(f.line) },
        String(f.variable),
      );
      break;
    default:
      error = new Error(data.message, cause);
      error.name = data.name;
  }
  // The message as the worker built it, not as these arguments would.
  Object.assign(error, f);
  Object.defineProperty(error, "message", {
    value: data.message,
    writable: true,
    configurable: true,
    enumerable: false,
  });
  if (data.stack !== undefined) error.stack = data.stack;
  return error;
}

function isPlain(value: unknown): boolean {
  return value === undefined || value === null ||
    ["string", "number", "boolean"].includes(typeof value) ||
    (Array.isArray(value) && value.every(isPlain));
}
