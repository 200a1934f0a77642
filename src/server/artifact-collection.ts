import type { ArtifactStore } from '../artifacts/artifact-store.js';
import { collectArtifacts, sweepStrays, type CollectionReport } from '../artifacts/collect-artifacts.js';
import type { Clock } from '../domain/clock.js';
import type { ReconcilerDuty } from '../reconciler/reconciler-duty.js';
import type { Store } from '../store/store.js';
import type { ServerConfig } from './server-config.js';

export interface ArtifactCollectionResult {
  collection: CollectionReport;
  /** The sweep for files a crash left behind, when this pass ran it. */
  strays: Awaited<ReturnType<typeof sweepStrays>> | null;
}

/**
 * Artifact collection (docs/rerun.md): outputs no job names any more, and the size budget; once
 * after start, then every `straySweepIntervalMs`, the blob tree is read whole for files a crash
 * left behind; and temporary files of uploads cut off by a crash. A duty of the reconciler's
 * kind, in server/ because it deletes files (the reconciler's layer reaches only the database).
 * Its three steps stay in one pass: the stray sweep must not judge a file while collection is
 * between deleting its row and deleting it.
 */
export function artifactCollection(
  store: Store,
  files: ArtifactStore,
  clock: Clock,
  s: Pick<ServerConfig, 'artifactsMaxBytes' | 'artifactsGraceMs' | 'artifactsGcIntervalMs' | 'straySweepIntervalMs' | 'uploadTempKeepMs'>,
): ReconcilerDuty<ArtifactCollectionResult> {
  let straysSweptAt: number | null = null;
  return {
    name: 'artifacts',
    intervalMs: s.artifactsGcIntervalMs,
    async runOnce() {
      const collection = await collectArtifacts(store, files, {
        now: () => clock.now(),
        maxBytes: s.artifactsMaxBytes,
        graceMs: s.artifactsGraceMs,
        dryRun: false,
      });
      let strays: ArtifactCollectionResult['strays'] = null;
      if (straysSweptAt === null || clock.now() - straysSweptAt >= s.straySweepIntervalMs) {
        straysSweptAt = clock.now();
        strays = await sweepStrays(store, files, { now: clock.now(), graceMs: s.artifactsGraceMs });
      }
      await files.sweepTemporary(clock.now() - s.uploadTempKeepMs);
      return { collection, strays };
    },
  };
}
