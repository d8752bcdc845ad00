/**
 * The tree the card reader validates: mappings, lists, scalars and aliases,
 * each with the 1-based line it starts on. Two readers build it: the
 * catalogue subset reader (`yaml_subset.ts`) for the plain YAML catalogues
 * are written in, and npm:yaml (`yaml_document.ts`) for everything else. The
 * card reader cannot tell which built it, so a card's errors are the same
 * whichever did.
 *
 * @module
 */

/** A node of the tree. */
export type YamlNode = YamlMap | YamlSeq | YamlScalar | YamlAlias | YamlOther;

/** A mapping, its pairs in file order. */
export interface YamlMap {
  readonly kind: "map";
  /** The 1-based line the mapping starts on (its first key, or its `{`). */
  readonly line: number | undefined;
  readonly pairs: readonly YamlPair[];
  /** The mapping as plain data (aliases resolved), as `JSON.stringify` takes it. */
  toJS(): unknown;
}

/** One `key: value` of a mapping; `null` where the YAML had no node at all. */
export interface YamlPair {
  readonly key: YamlNode | null;
  readonly value: YamlNode | null;
}

/** A list. */
export interface YamlSeq {
  readonly kind: "seq";
  /** The 1-based line the list starts on (its first `-`, or its `[`). */
  readonly line: number | undefined;
  readonly items: readonly (YamlNode | null)[];
  /** The list as plain data (aliases resolved), as `JSON.stringify` takes it. */
  toJS(): unknown;
}

/** A scalar, resolved by the YAML 1.2 core schema: string, number, boolean or null. */
export interface YamlScalar {
  readonly kind: "scalar";
  readonly line: number | undefined;
  readonly value: unknown;
}

/** `*name`: a reference to the node anchored `&name` earlier. */
export interface YamlAlias {
  readonly kind: "alias";
  readonly line: number | undefined;
  /** The anchor's name. */
  readonly source: string;
  /** The anchored node, or `undefined` when no such anchor comes before. */
  resolve(): YamlNode | undefined;
}

/** Anything else npm:yaml can build (a pair where a node should be); never valid in a card. */
export interface YamlOther {
  readonly kind: "other";
  readonly line: number | undefined;
}

/**
 * A plain-data copy of a mapping or list built from scalars, lists and
 * mappings alone (no aliases): what npm:yaml's `toJS()` gives for the same
 * text. Keys are strings.
 *
 * @param node A scalar, list or mapping.
 */
export function plainData(node: YamlNode | null): unknown {
  if (node === null) return null;
  switch (node.kind) {
    case "scalar":
      return node.value;
    case "seq":
      return node.items.map(plainData);
    case "map": {
      const out: Record<string, unknown> = {};
      for (const { key, value } of node.pairs) {
        out[String(plainData(key))] = plainData(value);
      }
      return out;
    }
    default:
      throw new Error(`plainData: a ${node.kind} node has no plain data`);
  }
}
