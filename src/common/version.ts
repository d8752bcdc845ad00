// From deno.json, which JSR ships: it cannot drift, and a JSON import needs no read permission.
import config from "../../deno.json" with { type: "json" };

export const VERSION: string = config.version;
