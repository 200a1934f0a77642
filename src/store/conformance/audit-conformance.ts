import { describe, expect, it } from 'vitest';
import type { Store } from '../store.js';

/** The audit log's folding and retention (docs/security.md, "The audit log"): part of every adapter's conformance suite. */
export function auditConformance(store: () => Store): void {
  describe('audit', () => {
    const now = 1_700_000_000_000;
    const who = { tokenId: 'tok_1', actor: 'team ml token tok_1 (ci)', action: 'job.cancel', target: 'job_1' };
    const refused = 'refused: 403 forbidden: no';

    it('the same refusal within the window is one row with a count and a last time; another refusal, or the same past the window, a new row', async () => {
      const s = store();
      for (let i = 0; i < 5; i++) await s.auditRecord({ ...who, result: refused, now: now + i * 1000, foldWithinMs: 60_000 });
      // Another reason, another target, another token: other refusals.
      await s.auditRecord({ ...who, result: 'refused: 404 not_found: no', now: now + 5000, foldWithinMs: 60_000 });
      await s.auditRecord({ ...who, target: 'job_2', result: refused, now: now + 5000, foldWithinMs: 60_000 });
      await s.auditRecord({ ...who, tokenId: 'tok_2', result: refused, now: now + 5000, foldWithinMs: 60_000 });
      // Past the window from the row's first time: a row of its own, which folds on.
      await s.auditRecord({ ...who, result: refused, now: now + 60_000, foldWithinMs: 60_000 });
      await s.auditRecord({ ...who, result: refused, now: now + 61_000, foldWithinMs: 60_000 });
      // Without a window: never folded, nor folded into.
      await s.auditRecord({ ...who, result: refused, now: now + 62_000 });
      await s.auditRecord({ ...who, result: refused, now: now + 63_000, foldWithinMs: 60_000 });
      const rows = await s.auditList({ limit: 100 });
      expect(rows.map((r) => [r.tokenId, r.target, r.result.slice(0, 12), r.count, r.at - now, r.lastAt - now])).toEqual([
        ['tok_1', 'job_1', 'refused: 403', 5, 0, 4000],
        ['tok_1', 'job_1', 'refused: 404', 1, 5000, 5000],
        ['tok_1', 'job_2', 'refused: 403', 1, 5000, 5000],
        ['tok_2', 'job_1', 'refused: 403', 1, 5000, 5000],
        ['tok_1', 'job_1', 'refused: 403', 3, 60_000, 63_000],
        ['tok_1', 'job_1', 'refused: 403', 1, 62_000, 62_000],
      ]);
      // A change that was made is its own row, never folded into a refusal's.
      const change = { ...who, action: 'token.create', target: null };
      await s.tokenCreate({ id: 'tok_9', kind: 'team', team: 'ml', name: 'x', hash: 'h9', expiresAt: null, now: now + 64_000, audit: change });
      await s.auditRecord({ ...change, result: 'ok', now: now + 64_000, foldWithinMs: 60_000 });
      expect((await s.auditList({ afterSeq: rows.at(-1)!.seq, limit: 10 })).map((r) => [r.action, r.result.slice(0, 2), r.count])).toEqual([
        ['token.create', 'ok', 1],
        ['token.create', 'ok', 1],
      ]);
    });

    it('retention deletes the rows begun before a time, oldest first, a bounded number a pass', async () => {
      const s = store();
      for (let i = 0; i < 5; i++) await s.auditRecord({ ...who, target: `job_${i}`, result: refused, now: now + i * 1000 });
      expect(await s.auditPrune({ before: now + 3000, limit: 2 })).toBe(2);
      expect((await s.auditList({ limit: 10 })).map((r) => r.target)).toEqual(['job_2', 'job_3', 'job_4']);
      expect(await s.auditPrune({ before: now + 3000, limit: 100 })).toBe(1);
      expect(await s.auditPrune({ before: now + 3000, limit: 100 })).toBe(0);
      expect((await s.auditList({ limit: 10 })).map((r) => r.target)).toEqual(['job_3', 'job_4']);
    });
  });
}
