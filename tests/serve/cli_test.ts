/**
 * The command line's own text and parsing, in process: `--help` can be
 * followed as written (usage lines, the required options, an example, exit
 * codes, flags grouped by purpose), and an unknown flag names the closest one.
 */
import assert from "node:assert/strict";
import { FLAG_NAMES, parseCli, USAGE } from "../../src/serve/cli.ts";
import { CLI_FLAGS, shownDefault } from "../../src/serve/cli_flags.ts";
import { SEMIOSERVE_DEFAULTS, UsageError } from "../../src/serve/config.ts";
import { ROOT_SUBDIRECTORIES } from "../../src/common/settings.ts";
import { Registry } from "../../src/catalogue.ts";

const DENO_JSON = new URL("../../deno.json", import.meta.url);
const CLI_DOC = new URL("../../docs/cli.md", import.meta.url);

/** The lines of a `--help` section: from its title to the next blank line. */
function section(title: string): string {
  const lines = USAGE.split("\n");
  const start = lines.findIndex((line) => line.startsWith(title));
  assert.ok(start >= 0, `--help has no "${title}" section:\n${USAGE}`);
  const end = lines.indexOf("", start);
  return lines.slice(start, end < 0 ? undefined : end).join("\n");
}

/** The flags a section names at the start of an entry (`  --port P ...`). */
function flagsIn(title: string): string[] {
  return [...section(title).matchAll(/^ {2}(--[a-z_-]+)/gm)].map((m) => m[1]!);
}

Deno.test("--help starts with usage lines that can be typed: the JSR module and the checkout's task", async () => {
  const config = JSON.parse(await Deno.readTextFile(DENO_JSON));
  const usage = section("Usage:").split("\n").slice(1).map((l) => l.trim());
  assert.equal(usage.length, 2, section("Usage:"));
  assert.ok(
    usage[0]!.startsWith(`deno run -A jsr:${config.name} <model>`),
    usage[0],
  );
  assert.ok(usage[1]!.startsWith("deno task start <model>"), usage[1]);
  // After the check that MY_LOCAL is set, the task is one `deno run … mod.ts`.
  assert.match(config.tasks.start, /(?:^|&& )deno run [^&|]* mod\.ts$/);
  // The task reads $MY_LOCAL: its usage line says it must be set.
  assert.match(config.tasks.start, /\$MY_LOCAL/);
  assert.match(usage[1]!, /MY_LOCAL=D set/);
  assert.doesNotMatch(USAGE, /Usage: serve /);
});

Deno.test("--help marks the models and --directory (or MY_LOCAL) as required", () => {
  const required = section("Required:");
  assert.match(required, /^ {2}<model> /m);
  assert.match(required, /^ {2}--directory D /m);
  assert.match(required, /required unless\s+env\s+MY_LOCAL/);
  assert.match(section("Usage:"), /<model> \[<model> \.\.\.\] --directory D/);
});

Deno.test("--help's example creates the root directory and runs a shipped model with flags that parse", async () => {
  const example = section("Example:").split("\n").slice(1).map((l) => l.trim());
  assert.equal(example.length, 2, section("Example:"));
  const [mkdir, run] = example as [string, string];
  const prefix = "deno run -A jsr:@mymodel/serve ";
  assert.ok(run.startsWith(prefix), run);
  const options = parseCli(run.slice(prefix.length).split(" "));
  assert.ok(options.directory, "the example passes --directory");
  assert.equal(
    mkdir,
    `mkdir -p ${
      ROOT_SUBDIRECTORIES.map((sub) => `${options.directory}/${sub}`).join(" ")
    }`,
  );
  const registry = await Registry.load();
  for (const model of options.models) registry.resolve(model);
});

Deno.test("--help lists the exit codes 0, 1 and 2", () => {
  const codes = section("Exit codes:").split("\n").slice(1).map((l) =>
    l.trim().split(" ")[0]
  );
  assert.deepEqual(codes, ["0", "1", "2"]);
  assert.match(section("Exit codes:"), /2 +usage error/);
});

Deno.test("--help groups the flags by purpose and names every flag the parser takes", () => {
  assert.deepEqual(flagsIn("Models:"), ["--catalogue"]);
  assert.deepEqual(flagsIn("API and connections:"), [
    "--host",
    "--port",
    "--dev_mode",
    "--header-timeout",
    "--idle-timeout",
    "--max-connections",
  ]);
  assert.deepEqual(flagsIn("GPUs:"), ["--gpus", "--gpu-release-timeout"]);
  assert.deepEqual(flagsIn("Supervision:"), [
    "--restart",
    "--restart-max-delay",
    "--failed-retry",
    "--health-interval",
    "--liveness-failures",
    "--start-timeout",
    "--stall-timeout",
    "--canary-interval",
    "--canary-timeout",
    "--grace",
    "--drain-timeout",
  ]);
  assert.deepEqual(flagsIn("Logs"), ["--log-max-bytes", "--log-keep"]);
  for (const flag of FLAG_NAMES) {
    assert.match(USAGE, new RegExp(`${flag}\\b`), `--help omits ${flag}`);
  }
});

Deno.test("--help lists every flag of the table in its section, with the table's default", () => {
  for (const flag of CLI_FLAGS) {
    const title = flag.group === "Logs" ? "Logs" : `${flag.group}:`;
    // The flag's entry: its first line and the indented lines after it.
    const lines = section(title).split("\n");
    const first = lines.findIndex((l) =>
      new RegExp(`^ {2}--${flag.name}\\b`).test(l)
    );
    assert.ok(first > 0, `--help's ${title} omits --${flag.name}`);
    const rest = lines.slice(first + 1);
    const end = rest.findIndex((l) => /^ {2}\S/.test(l));
    const entry = [lines[first]!, ...rest.slice(0, end < 0 ? undefined : end)]
      .map((l) => l.trim()).join(" ");
    const shown = shownDefault(flag);
    if (shown !== undefined) {
      assert.ok(entry.includes(`(default ${shown}`), entry);
    }
  }
});

Deno.test("every number flag: its default, typed as --help shows it, parses to the table's default; below its bound is one line naming the flag", () => {
  for (const flag of CLI_FLAGS) {
    if (flag.unit !== "seconds" && flag.unit !== "count") continue;
    const options = parseCli(["alpha", `--${flag.name}=${shownDefault(flag)}`]);
    assert.equal(
      options[flag.option],
      SEMIOSERVE_DEFAULTS[flag.option],
      flag.name,
    );
    const below = String(flag.min > 0 ? flag.min / 2 : -1);
    const expected = flag.unit === "count"
      ? `expected a whole number, ${flag.min} or more`
      : `expected ${
        flag.min > 0 ? "" : "0 or "
      }a decimal number of seconds from ${
        Math.max(flag.min, 0.001)
      } to 2147483.647 (a timer holds at most 2^31-1 ms, about 24.8 days)`;
    assert.throws(
      () => parseCli(["alpha", `--${flag.name}=${below}`]),
      (error) => {
        assert.ok(error instanceof UsageError);
        assert.equal(
          error.message,
          `Cannot use --${flag.name}=${below}: ${expected}`,
        );
        return true;
      },
      flag.name,
    );
  }
});

Deno.test("every seconds flag takes up to what a timer holds (2^31-1 ms) and refuses more, hex, binary, exponents and a value that rounds to 0 ms", () => {
  const seconds = CLI_FLAGS.flatMap((flag) =>
    flag.unit === "seconds" ? [flag] : []
  );
  assert.ok(seconds.length >= 12, `only ${seconds.length} seconds flags`);
  for (const flag of seconds) {
    const parsed = parseCli(["alpha", `--${flag.name}=2147483.647`]);
    assert.equal(parsed[flag.option], 2 ** 31 - 1, flag.name);
    const refused = [
      "2147483.648",
      "2592000",
      "0x10",
      "0b1",
      "0o7",
      "1e3",
      "Infinity",
      "",
      ...flag.min === 0 ? ["0.0004"] : [],
    ];
    for (const value of refused) {
      assert.throws(
        () => parseCli(["alpha", `--${flag.name}=${value}`]),
        (error) => {
          assert.ok(error instanceof UsageError);
          assert.match(
            error.message,
            new RegExp(
              `^Cannot use --${flag.name}=${
                value.replace(".", "\\.")
              }: expected .*to 2147483\\.647 \\(a timer holds at most 2\\^31-1 ms, about 24\\.8 days\\)$`,
            ),
          );
          return true;
        },
        `--${flag.name}=${value}`,
      );
    }
    if (flag.min === 0) {
      assert.equal(parseCli(["alpha", `--${flag.name}=0`])[flag.option], 0);
    }
  }
});

Deno.test("docs/cli.md names every flag the parser takes", async () => {
  const text = await Deno.readTextFile(CLI_DOC);
  for (const flag of FLAG_NAMES) {
    assert.ok(text.includes(flag), `docs/cli.md omits ${flag}`);
  }
});

for (
  const [args, message] of [
    [
      ["alpha", "--prot", "5000"],
      "Cannot parse the command line: Unknown option '--prot'; did you mean --port?",
    ],
    [
      ["alpha", "--prot=5000"],
      "Cannot parse the command line: Unknown option '--prot'; did you mean --port?",
    ],
    [
      ["alpha", "--gpu-release-timout", "5"],
      "Cannot parse the command line: Unknown option '--gpu-release-timout'; did you mean --gpu-release-timeout?",
    ],
    [
      ["alpha", "--directroy", "/srv"],
      "Cannot parse the command line: Unknown option '--directroy'; did you mean --directory?",
    ],
    [
      ["alpha", "--bogus"],
      "Cannot parse the command line: Unknown option '--bogus'",
    ],
  ] as const
) {
  Deno.test(`unknown flag ${args[1]}: ${message.includes("did you mean") ? "the closest flag is named" : "no guess when nothing is close"}`, () => {
    assert.throws(() => parseCli([...args]), (error) => {
      assert.ok(error instanceof UsageError);
      assert.equal(error.message, message);
      return true;
    });
  });
}
