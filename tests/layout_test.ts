/**
 * The layout of `src/` as an executable map: which folder may import which,
 * no import cycle between modules, the public doors alone at the top, and a
 * module doc on each folder's main file. The "Layout" section of
 * docs/development.md is the prose of the same map.
 */
import assert from "node:assert/strict";

const SRC = new URL("../src/", import.meta.url);

/**
 * Each room of `src/` and the rooms it may import. A top-level door
 * (`catalogue.ts`) belongs to the room of the same name (`catalogue/`).
 * Changing this table is changing the architecture: say why in the commit.
 */
const MAY_IMPORT: Record<string, readonly string[]> = {
  common: [],
  catalogue: ["common"],
  web: ["common"],
  engines: ["common", "catalogue"],
  gpu: ["common", "catalogue", "engines"],
  supervision: ["common", "catalogue", "engines", "gpu"],
  http: ["common", "catalogue", "web", "engines", "supervision"],
  metrics: ["common", "web", "gpu", "supervision"],
  status: ["common"],
  serve: [
    "common",
    "catalogue",
    "web",
    "engines",
    "gpu",
    "supervision",
    "http",
    "metrics",
  ],
};

/** The file that opens each folder's story, with a module doc saying what the folder must not know. */
const MAIN_FILE: Record<string, string> = {
  common: "common/log.ts",
  catalogue: "catalogue/card_reader.ts",
  web: "web/auth_middleware.ts",
  engines: "engines/server_process.ts",
  gpu: "gpu/placement.ts",
  supervision: "supervision/engine_run.ts",
  http: "http/handler.ts",
  metrics: "metrics/snapshot.ts",
  serve: "serve/cli.ts",
};

/** Modules that must stay pure functions of their inputs: they import only these rooms' modules. */
const PURE: Record<string, readonly string[]> = {
  "gpu/need.ts": [
    "catalogue",
    "gpu/need.ts",
    "common/one_line.ts",
    "engines/kinds",
    "common/config_error.ts",
  ],
  // Pure but for the one nvidia-smi look handed in.
  "gpu/placement.ts": [
    "catalogue",
    "gpu/need.ts",
    "gpu/placement.ts",
    "gpu/layout.ts",
    "gpu/nvidia_smi.ts",
    "engines/kinds",
  ],
  "supervision/restart_policy.ts": ["catalogue"],
  // Pure but for the facts handed in: the weight size and one nvidia-smi look.
  "gpu/weights_fit.ts": [
    "catalogue",
    "gpu/need.ts",
    "gpu/nvidia_smi.ts",
    "engines/kinds",
  ],
  // Engine kinds: a card in; a command line, a need, a flag rule out.
  "engines/kinds.ts": ["catalogue", "engines/kinds/"],
  // Traffic (issue 36): a metrics text and readings in; numbers and verdicts out.
  "engines/traffic.ts": ["catalogue", "engines/kinds/"],
  "engines/unknown_flags.ts": [
    "catalogue",
    "common/close_matches.ts",
    "engines/kinds/",
  ],
};

const DOORS = new Set([
  "serve.ts",
  "web.ts",
  "common.ts",
  "catalogue.ts",
  "status.ts",
]);

async function sourceFiles(dir = SRC, prefix = ""): Promise<string[]> {
  const out: string[] = [];
  for await (const entry of Deno.readDir(dir)) {
    if (entry.isDirectory) {
      out.push(
        ...await sourceFiles(
          new URL(`${entry.name}/`, dir),
          `${prefix}${entry.name}/`,
        ),
      );
    } else if (entry.name.endsWith(".ts")) out.push(`${prefix}${entry.name}`);
  }
  return out.sort();
}

/** `text` without its block comments and its whole-line `//` comments. */
function withoutComments(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
}

/** Relative imports of a module under `root`, comments (and so JSDoc examples) left out. */
function importsOf(path: string, text: string, root = SRC): string[] {
  const code = withoutComments(text);
  const specs = [
    ...code.matchAll(/(?:from|import)\s*\(?\s*"(\.\.?\/[^"]+)"/g),
  ].map((m) => m[1]!);
  const base = new URL(path, root);
  return specs
    .map((spec) => new URL(spec, base).href)
    .filter((href) => href.startsWith(root.href) && href.endsWith(".ts"))
    .map((href) => href.slice(root.href.length));
}

function roomOf(path: string): string {
  const slash = path.indexOf("/");
  return slash < 0 ? path.replace(/\.ts$/, "") : path.slice(0, slash);
}

/** Each `.ts` file under `root` (sorted) and its relative imports under `root`. */
async function importGraph(root: URL): Promise<Map<string, string[]>> {
  const graph = new Map<string, string[]>();
  for (const file of await sourceFiles(root)) {
    graph.set(
      file,
      importsOf(file, await Deno.readTextFile(new URL(file, root)), root),
    );
  }
  return graph;
}

const graph = await importGraph(SRC);
const files = [...graph.keys()];

Deno.test("src/ holds only the public doors at its top, at most 6", () => {
  const top = files.filter((file) => !file.includes("/"));
  assert.ok(top.length <= 6, `src/ has ${top.length} modules: ${top}`);
  for (const file of top) assert.ok(DOORS.has(file), `${file} is not a door`);
});

Deno.test("the doors only open: re-exports, and mod.ts-style running of main", async () => {
  const own: string[] = [];
  for (const door of DOORS) {
    const text = await Deno.readTextFile(new URL(door, SRC));
    const code = withoutComments(text)
      // Statements a door may hold: imports, re-exports, `if (import.meta.main) {…}`.
      .replace(/^(?:import|export)\b[^;]*;/gm, "")
      .replace(/^if \(import\.meta\.main\) \{[^}]*\}/gm, "")
      .trim();
    if (code !== "") own.push(`${door}: ${code.split("\n")[0]}`);
  }
  assert.deepEqual(own, [], "a door holds code of its own");
});

Deno.test("every folder of src/ is a room of the map", () => {
  for (const file of files) {
    const room = roomOf(file);
    assert.ok(room in MAY_IMPORT, `${file}: room ${room} is not in the map`);
  }
});

/** `file -> target` for each import from one room to another that `mayImport` does not allow. */
function wrongImports(
  imports: Map<string, string[]>,
  roomFor: (file: string) => string,
  mayImport: Record<string, readonly string[]>,
): string[] {
  const wrong: string[] = [];
  for (const [file, targets] of imports) {
    const room = roomFor(file);
    for (const target of targets) {
      const to = roomFor(target);
      if (to !== room && !mayImport[room]!.includes(to)) {
        wrong.push(`${file} -> ${target}`);
      }
    }
  }
  return wrong;
}

Deno.test("imports between rooms follow the direction of dependencies", () => {
  assert.deepEqual(wrongImports(graph, roomOf, MAY_IMPORT), []);
});

Deno.test("the map itself has no cycle between rooms", () => {
  const seen = new Set<string>();
  function visit(room: string, path: string[]): void {
    assert.ok(!path.includes(room), `cycle: ${[...path, room].join(" -> ")}`);
    if (seen.has(room)) return;
    for (const next of MAY_IMPORT[room]!) visit(next, [...path, room]);
    seen.add(room);
  }
  for (const room of Object.keys(MAY_IMPORT)) visit(room, []);
});

Deno.test("no import cycle between modules", () => {
  const state = new Map<string, "open" | "done">();
  function visit(file: string, path: string[]): void {
    if (state.get(file) === "done") return;
    assert.notEqual(
      state.get(file),
      "open",
      `cycle: ${[...path, file].join(" -> ")}`,
    );
    state.set(file, "open");
    for (const next of graph.get(file) ?? []) visit(next, [...path, file]);
    state.set(file, "done");
  }
  for (const file of graph.keys()) visit(file, []);
});

Deno.test("the launcher reads the environment when called: nothing serve.ts loads imports the common door or its import-time settings", () => {
  const loaded = new Set<string>();
  const visit = (file: string) => {
    if (loaded.has(file)) return;
    loaded.add(file);
    for (const next of graph.get(file) ?? []) visit(next);
  };
  visit("serve.ts");
  for (const file of ["common.ts", "common/environment.ts"]) {
    assert.ok(!loaded.has(file), `serve.ts loads ${file}`);
  }
});

Deno.test("pure modules import nothing that does I/O", () => {
  // Each engine kind is pure too (a Footprint is plain data: a budget's facts).
  const kinds = files.filter((file) => file.startsWith("engines/kinds/"))
    .map((file): [string, string[]] => [file, [
      "catalogue",
      "engines/kinds/",
      "engines/footprint.ts",
    ]]);
  for (const [file, allowed] of [...Object.entries(PURE), ...kinds]) {
    const imports = graph.get(file);
    assert.ok(imports, `${file} is missing`);
    for (const target of imports) {
      assert.ok(
        allowed.some((prefix) => target.startsWith(prefix)),
        `${file} imports ${target}`,
      );
    }
  }
});

Deno.test("each folder's main file says what the folder is for and must not know", async () => {
  for (const [room, file] of Object.entries(MAIN_FILE)) {
    const text = await Deno.readTextFile(new URL(file, SRC));
    const doc = text.match(/^\/\*\*([\s\S]*?)\*\//)?.[1] ?? "";
    assert.match(doc, /@module/, `${file} opens without a module doc`);
    assert.match(doc, new RegExp(`\`${room}/\``), `${file}: names no folder`);
    assert.match(
      doc,
      /knows nothing of/,
      `${file}: says nothing it must not know`,
    );
  }
});

// ---------------------------------------------------------------------------
// bench/: folders by role

const BENCH = new URL("../bench/", import.meta.url);

/**
 * Each room of `bench/` and the rooms it may import; `top` is the entry
 * points and `plan.ts` (what every phase shares). A phase measures, its rows
 * read the measurements, the report puts rows together.
 */
const BENCH_MAY_IMPORT: Record<string, readonly string[]> = {
  servers: ["top"],
  load: ["top", "servers"],
  phases: ["top", "servers", "load"],
  rows: ["top", "load", "phases", "report"],
  report: ["top", "phases", "rows"],
  top: ["servers", "load", "phases", "report"],
};

const benchGraph = await importGraph(BENCH);
const benchFiles = [...benchGraph.keys()];

function benchRoom(file: string): string {
  return file.includes("/") ? roomOf(file) : "top";
}

Deno.test("bench/: every file is in a room of the map, and imports follow it", () => {
  for (const file of benchFiles) {
    const room = benchRoom(file);
    assert.ok(room in BENCH_MAY_IMPORT, `bench/${file}: room ${room} unknown`);
  }
  assert.deepEqual(wrongImports(benchGraph, benchRoom, BENCH_MAY_IMPORT), []);
});

Deno.test("bench/: every phase keeps its rows in rows/<phase>.ts, and no phase builds rows", async () => {
  const phases = benchFiles.filter((file) => file.startsWith("phases/"));
  assert.ok(phases.length >= 6, `only ${phases.length} phases`);
  for (const phase of phases) {
    const rows = phase.replace(/^phases\//, "rows/");
    assert.ok(benchFiles.includes(rows), `${phase} has no ${rows}`);
    assert.ok(
      benchGraph.get(rows)!.includes(phase),
      `${rows} does not read ${phase}`,
    );
    assert.ok(
      !benchGraph.get(phase)!.some((target) => target.startsWith("report/")),
      `${phase} imports the report's table: its rows belong in ${rows}`,
    );
    const text = await Deno.readTextFile(new URL(phase, BENCH));
    assert.doesNotMatch(
      text,
      /^export function \w+(Rows|Targets|Notes)\b/m,
      `${phase} exports rows`,
    );
  }
  for (const rows of benchFiles.filter((file) => file.startsWith("rows/"))) {
    const phase = rows.replace(/^rows\//, "phases/");
    assert.ok(benchFiles.includes(phase), `${rows} belongs to no phase`);
  }
});
