/**
 * The catalogue phase's rows and targets: the load time of 5,000 cards, with
 * an alias each against written out in full, and 10,000 against 5,000 (2×
 * when loading is linear).
 *
 * @module
 */
import { median, PLAN } from "../plan.ts";
import { type Row, row, type Verdict } from "../report/table.ts";
import { CATALOGUE_CARDS, type CatalogueResults } from "../phases/catalogue.ts";

/** Twice the cards in at most this many times the time: linear, with room for noise. */
const LINEAR_RATIO = 3;
/** Cards sharing a value through aliases load at most this much slower than cards that spell it out. */
const ALIAS_RATIO = 1.5;

/** The method, for the report's Method paragraph. */
export const CATALOGUE_METHOD = [
  `Catalogue: ${PLAN.catalogueRounds} rotating rounds, each loading (\`Registry.load\`, timed inside a fresh`,
  `\`deno\` process, module load excluded) a generated catalogue of ${CATALOGUE_CARDS} flow-style cards each`,
  `with its own \`args\` mapping, one of ${CATALOGUE_CARDS} whose cards after the first name it through an`,
  `alias (\`args: *args\`), and one of ${
    2 * CATALOGUE_CARDS
  } such; rows show medians, targets the medians of per-round ratios.`,
].join(" ");

function ratio(values: readonly number[], base: readonly number[]): number {
  return median(values.map((v, i) => v / (base[i] ?? Number.NaN)));
}

/** The three load times. */
export function catalogueRows(r: CatalogueResults): Row[] {
  const n = CATALOGUE_CARDS.toLocaleString("en");
  const plain = median(r.plain);
  const aliases = median(r.aliases);
  return [
    row(`catalogue load, ${n} cards`, plain, "ms"),
    row(`catalogue load, ${n} cards with an alias each`, aliases, "ms", {
      label: `${n} cards`,
      value: plain,
    }),
    row(
      `catalogue load, ${
        (2 * CATALOGUE_CARDS).toLocaleString("en")
      } cards with an alias each`,
      median(r.aliasesDouble),
      "ms",
      { label: `${n} with aliases`, value: aliases },
    ),
  ];
}

/** Loading is linear in the cards, aliases included. */
export function catalogueTargets(r: CatalogueResults): Verdict[] {
  const linear = ratio(r.aliasesDouble, r.aliases);
  const aliased = ratio(r.aliases, r.plain);
  return [
    {
      name:
        `catalogue loading is linear: twice the cards with aliases ÷ ${CATALOGUE_CARDS} at most ${LINEAR_RATIO}`,
      pass: linear <= LINEAR_RATIO,
      detail: `${linear.toFixed(2)}×`,
    },
    {
      name:
        `aliases cost no more than spelling values out: ${CATALOGUE_CARDS} cards with an alias each ÷ without at most ${ALIAS_RATIO}`,
      pass: aliased <= ALIAS_RATIO,
      detail: `${aliased.toFixed(2)}×`,
    },
  ];
}
