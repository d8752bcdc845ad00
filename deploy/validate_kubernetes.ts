/**
 * Validates the Kubernetes manifests in `deploy/kubernetes/` offline against
 * the Kubernetes API schemas shipped in the npm package `kubernetes-models`
 * (JSON schemas generated from the Kubernetes OpenAPI document, checked with
 * ajv): unknown fields, wrong types and missing required fields fail.
 *
 * ```sh
 * deno run --allow-read --allow-env deploy/validate_kubernetes.ts [file.yaml ...]
 * ```
 *
 * Prints one line per document and exits 1 when any is invalid.
 *
 * @module
 */
import { parseAllDocuments } from "yaml";
import { StatefulSet } from "kubernetes-models/apps/v1/StatefulSet";
import { Secret } from "kubernetes-models/v1/Secret";
import { Service } from "kubernetes-models/v1/Service";

/** A model class of `kubernetes-models`: built from a manifest, `validate()` throws when invalid. */
interface Model {
  validate(): void;
}

const MODELS: Record<string, new (data: never) => Model> = {
  "apps/v1/StatefulSet": StatefulSet,
  "v1/Service": Service,
  "v1/Secret": Secret,
};

/**
 * Validates every document of a manifest file.
 *
 * @param file The YAML file.
 * @returns One problem per invalid document (empty when all are valid), and
 *   how many documents were checked.
 */
export async function validateFile(
  file: string,
): Promise<{ checked: number; problems: string[] }> {
  const problems: string[] = [];
  let checked = 0;
  for (const doc of parseAllDocuments(await Deno.readTextFile(file))) {
    if (doc.errors.length > 0) {
      problems.push(`${file}: invalid YAML: ${doc.errors[0]!.message}`);
      continue;
    }
    const data = doc.toJS({ maxAliasCount: -1 }) as
      | { apiVersion?: string; kind?: string; metadata?: { name?: string } }
      | null;
    if (data === null) continue;
    const key = `${data.apiVersion}/${data.kind}`;
    const name = `${file}: ${data.kind} ${data.metadata?.name ?? "(no name)"}`;
    const Model = MODELS[key];
    checked++;
    if (Model === undefined) {
      problems.push(
        `${name}: no schema for ${key} (expected one of ${
          Object.keys(MODELS).join(", ")
        })`,
      );
      continue;
    }
    try {
      new Model(data as never).validate();
    } catch (error) {
      problems.push(
        `${name}: ${(error as Error).message.replaceAll("\n", " ")}`,
      );
    }
  }
  return { checked, problems };
}

async function main(args: string[]): Promise<number> {
  const dir = new URL("./kubernetes/", import.meta.url);
  const files = args.length > 0 ? args : [...Deno.readDirSync(dir)]
    .filter((e) => e.isFile && e.name.endsWith(".yaml"))
    .map((e) => decodeURIComponent(new URL(e.name, dir).pathname))
    .sort();
  let failed = 0;
  for (const file of files) {
    const { checked, problems } = await validateFile(file);
    for (const problem of problems) console.error(`invalid: ${problem}`);
    failed += problems.length;
    console.log(`${file}: ${checked - problems.length}/${checked} valid`);
  }
  return failed === 0 ? 0 : 1;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
