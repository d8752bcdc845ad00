/**
 * Docs that cannot rot: every relative link in README.md and docs/*.md leads
 * to a file or folder of the repository, and every `#anchor` to a heading (or
 * an `id`) of the page it names, with GitHub's heading slugs, which are also
 * what JSR shows for the published README and docs/.
 */
import assert from "node:assert/strict";
import { dirname, join, normalize } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

/** The pages checked: README.md and every Markdown file in docs/. */
async function pages(): Promise<string[]> {
  const found = ["README.md"];
  for await (const entry of Deno.readDir(join(ROOT, "docs"))) {
    if (entry.isFile && entry.name.endsWith(".md")) {
      found.push(`docs/${entry.name}`);
    }
  }
  return found.sort();
}

/** The lines of a page outside fenced code blocks (fences may be indented). */
function prose(text: string): string[] {
  const lines: string[] = [];
  let fence: string | undefined;
  for (const line of text.split("\n")) {
    const marker = /^\s*(`{3,}|~{3,})/.exec(line)?.[1];
    if (fence === undefined && marker !== undefined) {
      fence = marker;
    } else if (fence !== undefined) {
      if (marker !== undefined && marker[0] === fence[0]) fence = undefined;
    } else {
      lines.push(line);
    }
  }
  return lines;
}

/**
 * A heading's anchor as GitHub makes it: the rendered text (a link gives its
 * text, code its content) in lower case, every character that is not a
 * letter, digit, `-`, `_` or space dropped, each space a `-`.
 */
function slug(heading: string): string {
  return heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1")
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "")
    .replace(/ /g, "-");
}

/** Every anchor a page offers: heading slugs (repeats get -1, -2 …) and ids. */
function anchors(text: string): Set<string> {
  const found = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of prose(text)) {
    const heading = /^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$/.exec(line)?.[1];
    if (heading !== undefined) {
      const base = slug(heading);
      const count = seen.get(base) ?? 0;
      seen.set(base, count + 1);
      found.add(count === 0 ? base : `${base}-${count}`);
    }
    for (const id of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) {
      found.add(id[1]!);
    }
  }
  return found;
}

/** The link targets of a page: inline links and images, and definitions. */
function links(text: string): string[] {
  const targets: string[] = [];
  for (const line of prose(text)) {
    const bare = line.replace(/(`+)[^`]*?\1/g, "");
    for (const m of bare.matchAll(/\]\(\s*(<[^>]*>|[^)\s]+)/g)) {
      targets.push(m[1]!.replace(/^<|>$/g, ""));
    }
    const definition = /^ {0,3}\[[^\]]+\]:\s*(\S+)/.exec(bare)?.[1];
    if (definition !== undefined) targets.push(definition);
  }
  return targets;
}

/**
 * The links of `pages` (path → text, paths relative to the root) that lead
 * nowhere, as `page -> target (why)`. `exists` says whether a path is there.
 */
function brokenLinks(
  pages: ReadonlyMap<string, string>,
  exists: (path: string) => boolean,
): string[] {
  const broken: string[] = [];
  for (const [page, text] of pages) {
    for (const target of links(text)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:
      const hash = target.indexOf("#");
      const path = decodeURI(hash < 0 ? target : target.slice(0, hash));
      const fragment = hash < 0 ? undefined : decodeURI(target.slice(hash + 1));
      const dest = path === "" ? page : normalize(join(dirname(page), path));
      if (dest.startsWith("..")) {
        broken.push(`${page} -> ${target} (outside the repository)`);
      } else if (!exists(dest)) {
        broken.push(`${page} -> ${target} (no such file)`);
      } else if (fragment !== undefined && dest.endsWith(".md")) {
        const destText = pages.get(dest);
        if (destText === undefined) {
          broken.push(`${page} -> ${target} (anchor into an unchecked page)`);
        } else if (!anchors(destText).has(fragment)) {
          broken.push(`${page} -> ${target} (no heading #${fragment})`);
        }
      }
    }
  }
  return broken;
}

function existsOnDisk(path: string): boolean {
  try {
    Deno.statSync(join(ROOT, path));
    return true;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return false;
    throw error;
  }
}

Deno.test("every relative link and #anchor in README.md and docs/*.md resolves", async () => {
  const texts = new Map<string, string>();
  for (const page of await pages()) {
    texts.set(page, await Deno.readTextFile(join(ROOT, page)));
  }
  assert.ok(texts.size >= 2, `only ${[...texts.keys()]} found`);
  const count = [...texts.values()].reduce((n, t) => n + links(t).length, 0);
  assert.ok(count > 50, `only ${count} links found: is the extraction broken?`);
  assert.deepEqual(brokenLinks(texts, existsOnDisk), []);
});

Deno.test("the link check catches a missing file, a missing anchor and a way out of the repository", () => {
  const texts = new Map([
    [
      "README.md",
      [
        "# Title",
        "See [the guide](docs/guide.md#set-up), [gone](docs/gone.md),",
        "[a typo](docs/guide.md#setup), [here](#title), [there](#nowhere),",
        "[up](../elsewhere.md), [web](https://example.com/x.md#y), `[code](no.md)`.",
        "```",
        "[fenced](nowhere.md)",
        "```",
      ].join("\n"),
    ],
    ["docs/guide.md", "# Guide\n\n## Set-up\n"],
  ]);
  const files = new Set(["README.md", "docs/guide.md"]);
  assert.deepEqual(brokenLinks(texts, (path) => files.has(path)), [
    "README.md -> docs/gone.md (no such file)",
    "README.md -> docs/guide.md#setup (no heading #setup)",
    "README.md -> #nowhere (no heading #nowhere)",
    "README.md -> ../elsewhere.md (outside the repository)",
  ]);
});

Deno.test("anchors follow GitHub's slugs: punctuation dropped, spaces to -, repeats numbered", () => {
  const text = [
    "# @mymodel/serve",
    "## Crash safety: records, reaping, the watchdog",
    "### Example: an 8-GPU server",
    "## `--max-connections` and the_limit",
    "## [Linked](x.md) heading ##",
    "## Logs",
    "## Logs",
    "   ```sh",
    "# not a heading",
    "   ```",
    '<a id="custom-anchor"></a>',
  ].join("\n");
  assert.deepEqual([...anchors(text)], [
    "mymodelserve",
    "crash-safety-records-reaping-the-watchdog",
    "example-an-8-gpu-server",
    "--max-connections-and-the_limit",
    "linked-heading",
    "logs",
    "logs-1",
    "custom-anchor",
  ]);
});

Deno.test("the pages checked are the ones published with the package", async () => {
  const config = JSON.parse(
    await Deno.readTextFile(join(ROOT, "deno.json")),
  );
  const include: string[] = config.publish.include;
  for (const page of await pages()) {
    assert.ok(
      include.some((entry) =>
        entry === page || (entry.endsWith("/") && page.startsWith(entry))
      ),
      `${page} is not in deno.json publish.include: its links would break on JSR`,
    );
  }
});

Deno.test("the docs list the exit causes and the states from the tables the metrics use", async () => {
  const { EXIT_CAUSES } = await import(
    "../src/supervision/engine_detail.ts"
  );
  const { ENGINE_STATES } = await import(
    "../src/supervision/engine_state.ts"
  );
  const supervision = await Deno.readTextFile(
    join(ROOT, "docs/supervision.md"),
  );
  const causes = [...supervision.matchAll(/^\| `([a-z-]+)` +\|/gm)].map((m) =>
    m[1]
  ).filter((c) => (EXIT_CAUSES as readonly string[]).includes(c!));
  assert.deepEqual(causes, [...EXIT_CAUSES], "the exit-cause table, in order");
  const operations = await Deno.readTextFile(
    join(ROOT, "docs/operations.md"),
  );
  const stateRow = operations.split("\n").find((l) =>
    l.startsWith("| `state`")
  )!;
  for (const state of ENGINE_STATES) {
    assert.match(stateRow, new RegExp(`\`${state}\``), `state ${state}`);
  }
});
