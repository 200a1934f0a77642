import type { AuditEntry } from '../store/records.js';
import type { CollectionPlan, Store } from '../store/store.js';
import type { ArtifactStore } from './artifact-store.js';

export interface CollectionReport extends CollectionPlan {
  dryRun: boolean;
  /** Files deleted; kept because written again meanwhile (judged again later); already gone. */
  deleted: number;
  kept: number;
  missing: number;
  freedBytes: number;
}

/** Passes one call makes when a pass could not take every unreferenced blob. */
const MAX_PASSES = 20;

/**
 * One collection (docs/rerun.md, "Retention and collection"): the store decides, in a
 * transaction, which blobs no job names any more and which ended jobs' outputs the size budget
 * releases, and deletes their rows; then their files go, each unless it was written again in the
 * last `graceMs` (an upload of the same content under way), which is recorded again instead.
 * Rows first, files after: a crash between leaves files no row names, never a row without its file.
 */
export async function collectArtifacts(
  store: Store,
  files: ArtifactStore,
  p: { now: () => number; maxBytes: number | null; graceMs: number; dryRun: boolean; audit?: AuditEntry },
): Promise<CollectionReport> {
  let report: CollectionReport | null = null;
  for (let pass = 0; pass < MAX_PASSES; pass++) {
    const plan = await store.artifactsCollect({ now: p.now(), maxBytes: p.maxBytes, dryRun: p.dryRun, ...(pass === 0 && p.audit ? { audit: p.audit } : {}) });
    const r: CollectionReport = report
      ? {
          ...report,
          collect: [...report.collect, ...plan.collect],
          release: [...report.release, ...plan.release],
          bytesAfter: plan.bytesAfter,
          more: plan.more,
        }
      : { ...plan, dryRun: p.dryRun, deleted: 0, kept: 0, missing: 0, freedBytes: 0 };
    report = r;
    if (p.dryRun) return r;
    const keep: { blob: string; size: number }[] = [];
    const freshSince = p.now() - p.graceMs;
    for (const c of plan.collect) {
      const what = await files.collect(c.blob, freshSince);
      if (what === 'kept') keep.push({ blob: c.blob, size: c.size });
      else if (what === 'deleted') r.freedBytes += c.size;
      r[what]++;
    }
    await store.artifactsKeep({ blobs: keep, now: p.now() });
    if (keep.length) r.bytesAfter += keep.reduce((t, k) => t + k.size, 0);
    if (!plan.more) break;
  }
  return report!;
}

/**
 * Files a crash left in the blob tree (ArtifactStore.sweepStrays, docs/rerun.md "Files a crash
 * leaves"), judged against the store's blob rows; what was written in the last `graceMs` is spared.
 */
export function sweepStrays(store: Store, files: ArtifactStore, p: { now: number; graceMs: number }): ReturnType<ArtifactStore['sweepStrays']> {
  return files.sweepStrays((keys) => store.artifactBlobsKnown({ keys }), p.now - p.graceMs);
}
