import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import type { AuditEntry, AuditRecord } from '../records.js';
import type { Db, TxContext } from './tx-context.js';

/** What makes two refusals the same one (docs/security.md, "The audit log"): who, as what, asked for what, on what, and why it was refused. */
function foldKey(p: AuditEntry & { result: string }): string {
  return createHash('sha256')
    .update(JSON.stringify([p.tokenId, p.actor, p.action, p.target, p.result]))
    .digest('base64url');
}

/**
 * A refused request's row, or one more on the row of the same refusal begun within
 * `foldWithinMs` (its count and last time): a caller refused hundreds of times a second writes
 * one row a window, not one a request. A row spans at most the window, so the audit's retention
 * (by `at`) never keeps a row alive by folding into it forever.
 */
export async function auditRecord(tx: TxContext, p: AuditEntry & { result: string; foldWithinMs?: number }): Promise<void> {
  if (!p.foldWithinMs || p.foldWithinMs <= 0) return tx.audit(p, { result: p.result });
  const key = foldKey(p);
  const same = await tx.db
    .selectFrom('audit')
    .select('seq')
    .where('fold_key', '=', key)
    .where('at', '>', tx.now - p.foldWithinMs)
    .orderBy('seq', 'desc')
    .limit(1)
    .executeTakeFirst();
  if (!same) return tx.audit(p, { result: p.result, foldKey: key });
  await tx.db
    .updateTable('audit')
    .set({ count: sql<number>`count + 1`, last_at: sql<number>`case when ${tx.now} > coalesce(last_at, at) then ${tx.now} else coalesce(last_at, at) end` })
    .where('seq', '=', same.seq)
    .execute();
}

export async function auditList(db: Db, p: { afterSeq?: number; since?: number; limit: number }): Promise<AuditRecord[]> {
  let q = db.selectFrom('audit').select(['seq', 'at', 'token_id', 'actor', 'action', 'target', 'result', 'count', 'last_at']).orderBy('seq').limit(p.limit);
  if (p.afterSeq !== undefined) q = q.where('seq', '>', p.afterSeq);
  if (p.since !== undefined) q = q.where('at', '>=', p.since);
  return (await q.execute()).map((r) => ({
    seq: Number(r.seq),
    at: Number(r.at),
    tokenId: r.token_id,
    actor: r.actor,
    action: r.action,
    target: r.target,
    result: r.result,
    count: Number(r.count),
    lastAt: Number(r.last_at ?? r.at),
  }));
}

/** The oldest rows begun before `before`, at most `limit` of them (a pass of the retention loop stays short). */
export async function auditPrune(db: Db, p: { before: number; limit: number }): Promise<number> {
  const r = await db
    .deleteFrom('audit')
    .where('seq', 'in', (q) => q.selectFrom('audit').select('seq').where('at', '<', p.before).orderBy('seq').limit(p.limit))
    .executeTakeFirst();
  return Number(r.numDeletedRows);
}
