/**
 * Two llama.cpp cards whose footprints the book already holds (seeded in the
 * root's `data/footprints.json`, as a start there would have left them):
 * `--dry-run` places them on one GPU when they fit together, on two when they
 * do not (refused with one line where the machine has one GPU).
 *
 * @module
 */
import { stringify } from "yaml";
import { Registry } from "../../src/catalogue.ts";
import { bookPath, footprintKey } from "../../src/gpu/footprint_book.ts";
import type { StartPlan } from "../../src/serve.ts";
import { freePorts, siteArgs } from "../../tests/support/helpers.ts";
import type { Scenario } from "./scenario.ts";
import { expect } from "./scope.ts";

const MOD = new URL("../../mod.ts", import.meta.url).pathname;
const NAMES = ["packa", "packb"];

export const llamaPacking: Scenario = {
  id: "llama-packing",
  title: "two llama.cpp cards with measured footprints: one GPU, or two",
  async run({ world, scope }) {
    const cards = Object.fromEntries(NAMES.map((name) => [name, {
      verb: "chat",
      hub: `org/${name}`,
      engine: "llama.cpp",
    }]));
    const catalogue = `${scope.root}/packing.yaml`;
    await Deno.writeTextFile(catalogue, stringify({ models: cards }));
    const registry = Registry.parse(stringify({ models: cards }));
    // The plan only locates the executable: it never runs.
    await Deno.mkdir(`${scope.root}/bin`, { recursive: true });
    await Deno.writeTextFile(`${scope.root}/bin/llama-server`, "#!/bin/sh\n", {
      mode: 0o755,
    });
    const gpus = [world.gpu.index, ...world.spare ? [world.spare] : []];
    const plan = async (share: number) => {
      const mib = Math.floor(share * world.gpu.totalMiB);
      const entries = NAMES.map((name) => ({
        key: footprintKey(registry.get(name)),
        device: world.gpu.name ?? "",
        footprint: {
          weights_mib: mib,
          kv_cache_mib: null,
          kv_tokens: null,
          graphs_mib: null,
          compute_mib: null,
          total_mib: mib,
          device: "CUDA0",
          measured_at: new Date().toISOString(),
          from: "seeded by gpu-check",
        },
      }));
      await Deno.writeTextFile(
        bookPath(scope.root),
        JSON.stringify({ format: "mymodel-serve footprints 1", entries }),
      );
      const out = await new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "-A",
          "--quiet",
          MOD,
          ...NAMES,
          ...siteArgs(freePorts(3), scope.root, catalogue),
          "--gpus",
          gpus.join(","),
          "--dry-run",
          "--json",
        ],
        env: {
          ...world.env,
          PATH: `${scope.root}/bin:${world.env.PATH}`,
          NUCLEUS_MODE: "dev",
          NO_COLOR: "1",
        },
        stdin: "null",
      }).output();
      const text = new TextDecoder().decode(out.stdout);
      const parsed = JSON.parse(text) as StartPlan | {
        ok: false;
        error: string;
      };
      return { mib, parsed };
    };
    const where = (p: StartPlan) =>
      p.engines.map((e) => (e.gpus ?? []).join(","));
    const fits = await plan(0.3);
    expect(
      fits.parsed.ok === true &&
        where(fits.parsed).join(" ") ===
          `${world.gpu.index} ${world.gpu.index}`,
      `both on GPU ${world.gpu.index} with ${fits.mib} MiB measured each`,
      JSON.stringify(fits.parsed.ok ? where(fits.parsed) : fits.parsed),
    );
    const apart = await plan(0.6);
    const two = world.spare
      ? apart.parsed.ok === true &&
        where(apart.parsed).join(" ") === gpus.join(" ")
      : apart.parsed.ok === false &&
        /Cannot place packb: needs 1 GPU, 0 free/.test(apart.parsed.error);
    expect(
      two,
      world.spare
        ? `one each on GPUs ${gpus.join(", ")} with ${apart.mib} MiB each`
        : `packb refused (one GPU, ${apart.mib} MiB each do not fit)`,
      JSON.stringify(apart.parsed.ok ? where(apart.parsed) : apart.parsed),
    );
    const line = (p: StartPlan) =>
      p.gpus.map((g) =>
        `GPU ${g.device}: ${
          g.engines.map((e) => `${e.name} ${e.need_mib} MiB`).join(" + ") || "-"
        }`
      ).join("; ");
    return {
      summary: `${fits.mib} MiB each: ${
        line(fits.parsed as StartPlan)
      }; ${apart.mib} MiB each: ${
        apart.parsed.ok ? line(apart.parsed) : apart.parsed.error
      }`,
    };
  },
};
