import { ArtifactStore } from '../artifacts/artifact-store.js';
import type { ApiContext } from './api-context.js';
import { errorText } from '../lib/error-text.js';

/**
 * Why each of these outcomes' named outputs cannot be committed, by attempt (none: all were
 * uploaded whole). A file uploaded before 0014 into the attempt's own directory (an outcome
 * reported across the upgrade) is recorded as the attempt's upload where it lies.
 */
export async function missingOutputs(
  ctx: ApiContext,
  machineId: string,
  outcomes: readonly { attemptId: string; token: number; outputs: { path: string; size: number }[] }[],
): Promise<Map<string, string>> {
  const problems = new Map<string, string>();
  if (outcomes.length === 0) return problems;
  const uploads = new Map((await ctx.store.outputUploads({ attemptIds: outcomes.map((o) => o.attemptId) })).map((u) => [`${u.attemptId}\0${u.path}`, u]));
  for (const c of outcomes) {
    for (const o of c.outputs) {
      let rel: string;
      try {
        rel = ArtifactStore.checkPath(o.path);
      } catch (err) {
        problems.set(c.attemptId, errorText(err));
        break;
      }
      const u = uploads.get(`${c.attemptId}\0${rel}`);
      if (u?.size === o.size) continue;
      const legacy = u ? null : await ctx.artifacts.legacySize(c.attemptId, rel);
      if (legacy === o.size) {
        try {
          await ctx.store.outputUploaded({
            attemptId: c.attemptId,
            token: c.token,
            machineId,
            path: rel,
            blob: ArtifactStore.legacyKey(c.attemptId, rel),
            size: legacy,
            now: ctx.clock.now(),
          });
          continue;
        } catch (err) {
          problems.set(c.attemptId, `output ${o.path} cannot be recorded: ${errorText(err)}`);
          break;
        }
      }
      problems.set(c.attemptId, `output ${o.path} was not uploaded (or has ${u?.size ?? legacy} bytes, not ${o.size})`);
      break;
    }
  }
  return problems;
}
