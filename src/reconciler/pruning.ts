import type { Clock } from '../domain/clock.js';
import type { Store } from '../store/store.js';
import type { ReconcilerDuty } from './reconciler-duty.js';

export interface PruningSettings {
  pruneIntervalMs: number;
  /** Published outbox rows are kept this long (for a look when debugging), then dropped. */
  outboxKeepMs: number;
  /** Idempotency-Keys answer retries this long (IETF's draft and Stripe keep them 24 h). */
  idempotencyKeepMs: number;
  /** Audit rows are kept this long from their first time, then deleted (GANTRY_AUDIT_RETENTION_DAYS). */
  auditKeepMs: number;
  /** Revoked and expired tokens are kept this long after they ended, then deleted (GANTRY_TOKEN_RETENTION_DAYS). */
  tokenKeepMs: number;
}

/** At most this many audit rows deleted a pass: a first pass over years of rows stays short, the next ones go on. */
const AUDIT_BATCH = 1000;
/** Tokens are looked at once an hour (a full read of the table, thousands of rows with a large fleet's credentials), more often while a pass finds a full batch. */
const TOKENS_EVERY_MS = 3_600_000;
const TOKENS_BATCH = 1000;

/** Deletes what has been kept long enough: published outbox rows, old Idempotency-Keys, audit rows past their retention, and tokens long revoked or expired. */
export function pruning(
  store: Store,
  clock: Clock,
  s: PruningSettings,
): ReconcilerDuty<{ outbox: number; idempotencyKeys: number; audit: number; tokens: number }> {
  let tokensDueAt = 0;
  return {
    name: 'pruning',
    intervalMs: s.pruneIntervalMs,
    async runOnce() {
      const outbox = await store.outboxPrune({ before: clock.now() - s.outboxKeepMs });
      const idempotencyKeys = await store.idempotencyPrune({ before: clock.now() - s.idempotencyKeepMs });
      const audit = await store.auditPrune({ before: clock.now() - s.auditKeepMs, limit: AUDIT_BATCH });
      let tokens = 0;
      if (clock.now() >= tokensDueAt) {
        tokens = await store.tokensPrune({ before: clock.now() - s.tokenKeepMs, limit: TOKENS_BATCH });
        tokensDueAt = tokens < TOKENS_BATCH ? clock.now() + TOKENS_EVERY_MS : 0;
      }
      return { outbox, idempotencyKeys, audit, tokens };
    },
  };
}
