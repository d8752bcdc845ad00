/**
 * Reading the tree's nodes for the card reader: following aliases,
 * describing values for "got ..." in messages, and turning a node's problem
 * into a {@linkcode CatalogueError} with its card, field and line.
 *
 * @module
 */
import {
  CatalogueError,
  type CatalogueErrorOptions,
} from "./catalogue_error.ts";
import type { YamlNode } from "./yaml_tree.ts";

/** What validation needs to report problems: the catalogue's name. */
export interface Context {
  readonly file: string;
}

/** A field's value node (aliases followed) and where to report problems with it. */
export interface FieldValue {
  value: YamlNode | null;
  where: Where;
}

/** Where a problem is: the card, the field, and the node whose line is reported. */
export interface Where {
  card?: string | undefined;
  field?: string | undefined;
  node?: YamlNode | null | undefined;
}

/** Throws the CatalogueError for a problem at `where`. */
export function fail(ctx: Context, where: Where, detail: string): never {
  const line = where.node?.line;
  const options: CatalogueErrorOptions = {};
  if (where.card !== undefined) options.card = where.card;
  if (where.field !== undefined) options.field = where.field;
  if (line !== undefined) options.line = line;
  throw new CatalogueError(ctx.file, detail, options);
}

/** Follows an alias to the node it names; every other node is returned as is. */
export function deref(
  ctx: Context,
  where: Where,
  node: YamlNode | null,
): YamlNode | null {
  if (node?.kind !== "alias") return node;
  const target = node.resolve();
  if (target === undefined) {
    fail(
      ctx,
      where,
      `unknown anchor '${node.source}' (expected an anchor defined earlier with &${node.source})`,
    );
  }
  return target;
}

/** A short description of a node for "got ..." in messages. */
export function describe(node: YamlNode | null | undefined): string {
  if (node === null || node === undefined) return "nothing";
  if (node.kind === "map") return "a mapping";
  if (node.kind === "seq") return "a list";
  if (node.kind === "scalar") {
    const value = node.value;
    if (value === null || value === undefined) return "null";
    if (typeof value === "string") return `'${clip(value)}'`;
    return String(value);
  }
  return "an unsupported value";
}

export function clip(text: string): string {
  const escaped = JSON.stringify(text).slice(1, -1);
  return escaped.length > 60 ? `${escaped.slice(0, 57)}...` : escaped;
}

export function scalarValue(node: YamlNode | null | undefined): unknown {
  return node?.kind === "scalar" ? node.value : undefined;
}

/** A mapping key as text; keys must be strings. */
export function keyText(
  ctx: Context,
  where: Where,
  key: YamlNode | null,
): string {
  const value = scalarValue(deref(ctx, where, key));
  if (typeof value !== "string") {
    fail(
      ctx,
      { ...where, node: key },
      `expected a string key, got ${describe(deref(ctx, where, key))}`,
    );
  }
  return value;
}
