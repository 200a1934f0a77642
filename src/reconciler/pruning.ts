import type { Clock } from '../domain/clock.js';
import type { Store } from '../store/store.js';
import type { ReconcilerDuty } from './reconciler-duty.js';

export interface PruningSettings {
  pruneIntervalMs: number;
  /** Published outbox rows are kept this long (for a look when debugging), then dropped. */
  outboxKeepMs: number;
  /** Idempotency-Keys answer retries this long (IETF's draft and Stripe keep them 24 h). */
  idempotencyKeepMs: number;
}

/** Deletes what has been kept long enough: published outbox rows and old Idempotency-Keys. */
export function pruning(store: Store, clock: Clock, s: PruningSettings): ReconcilerDuty<{ outbox: number; idempotencyKeys: number }> {
  return {
    name: 'pruning',
    intervalMs: s.pruneIntervalMs,
    async runOnce() {
      const outbox = await store.outboxPrune({ before: clock.now() - s.outboxKeepMs });
      const idempotencyKeys = await store.idempotencyPrune({ before: clock.now() - s.idempotencyKeepMs });
      return { outbox, idempotencyKeys };
    },
  };
}
