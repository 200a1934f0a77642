import type { Clock } from '../domain/clock.js';
import type { Store } from '../store/store.js';
import type { ReconcilerDuty } from './reconciler-duty.js';

export interface RetentionSettings {
  /** Jobs that ended this long ago are deleted, with their logs, events and references to outputs. */
  retentionMs: number;
  retentionIntervalMs: number;
  /** At most this many jobs deleted a pass. */
  retentionBatch: number;
}

/**
 * Ended jobs go after `retentionMs`, with their references to outputs; outputs no job names any
 * more go at the next artifact collection (docs/rerun.md), attempt directories written before
 * 0014 now, through `removeLegacyDirs`. Returns the ids of the jobs deleted.
 */
export function retention(
  store: Store,
  clock: Clock,
  s: RetentionSettings,
  /** Removes attempt directories written before 0014 that no job names a file in any more. */
  removeLegacyDirs: (attemptIds: string[]) => Promise<void> = async () => {},
): ReconcilerDuty<string[]> {
  return {
    name: 'retention',
    intervalMs: s.retentionIntervalMs,
    async runOnce() {
      const now = clock.now();
      const expired = await store.jobsExpire({ finishedBefore: now - s.retentionMs, limit: s.retentionBatch, now });
      if (expired.legacyDirs.length) await removeLegacyDirs(expired.legacyDirs);
      return expired.jobs;
    },
  };
}
