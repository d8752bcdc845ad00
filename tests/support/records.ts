/** Where a stand-in engine's record says it runs (`FAKE_ENGINE_RECORD_DIR`). */
import { readRecord, waitFor } from "./helpers.ts";

/** The pid of the stand-in engine on `port`, once its record is written. */
export async function pidOf(records: string, port: number): Promise<number> {
  let pid: number | undefined;
  await waitFor(async () => {
    pid = (await readRecord(records, port))?.pid;
    return pid !== undefined;
  }, `a stand-in engine on ${port}`);
  return pid!;
}
