import { describe, expect, it } from 'vitest';
import { ConflictError } from '../../domain/errors.js';
import type { Store } from '../store.js';
import { cpuMachine } from './fixtures.js';

/** Tokens (docs/security.md): part of every adapter's conformance suite. */
export function tokenConformance(store: () => Store): void {
  describe('tokens', () => {
    const now = 1_700_000_000_000;

    it('keeps a token by its hash only; lists without hashes; revokes once', async () => {
      const s = store();
      const made = await s.tokenCreate({ id: 'tok_1', kind: 'team', team: 'new-team', name: 'ci', hash: 'h1', expiresAt: null, now });
      expect(made).toEqual({ id: 'tok_1', kind: 'team', team: 'new-team', machineId: null, name: 'ci', createdAt: now, expiresAt: null, revokedAt: null });
      expect(await s.tokenByHash({ hash: 'h1' })).toEqual(made);
      expect(await s.tokenByHash({ hash: 'h2' })).toBeNull();
      await s.tokenCreate({ id: 'tok_2', kind: 'join', team: null, name: 'nodes', hash: 'h2', expiresAt: now + 1000, now });
      expect((await s.tokenList({})).map((t) => t.id)).toEqual(['tok_1', 'tok_2']);
      expect(JSON.stringify(await s.tokenList({}))).not.toMatch(/"h1"|"h2"/);
      expect(await s.tokenRevoke({ id: 'tok_1', now: now + 5 })).toMatchObject({ changed: true, token: { revokedAt: now + 5 } });
      expect(await s.tokenRevoke({ id: 'tok_1', now: now + 9 })).toMatchObject({ changed: false, token: { revokedAt: now + 5 } });
      expect(await s.tokenRevoke({ id: 'tok_nope', now })).toBeNull();
      expect((await s.tokenList({})).map((t) => t.id)).toEqual(['tok_2']);
      expect((await s.tokenList({ includeRevoked: true })).map((t) => t.id)).toEqual(['tok_1', 'tok_2']);
      // A hash is a token's alone.
      await expect(s.tokenCreate({ id: 'tok_3', kind: 'admin', team: null, name: 'dup', hash: 'h2', expiresAt: null, now })).rejects.toThrow();
    });

    it('prunes tokens revoked or expired before a time, the longest gone first, at most a batch', async () => {
      const s = store();
      const make = (id: string, expiresAt: number | null) => s.tokenCreate({ id, kind: 'team', team: 'ml', name: id, hash: `h_${id}`, expiresAt, now });
      await make('tok_live', null);
      await make('tok_future', now + 10_000);
      await make('tok_expired_first', now + 100);
      await make('tok_expired_late', now + 5_000);
      await make('tok_revoked', null);
      await s.tokenRevoke({ id: 'tok_revoked', now: now + 200 });
      const ids = async () => (await s.tokenList({ includeRevoked: true })).map((t) => t.id).sort();
      expect(await s.tokensPrune({ before: now + 100, limit: 10 })).toBe(0);
      expect(await s.tokensPrune({ before: now + 1_000, limit: 1 })).toBe(1);
      expect(await ids()).toEqual(['tok_expired_late', 'tok_future', 'tok_live', 'tok_revoked']);
      expect(await s.tokensPrune({ before: now + 1_000, limit: 10 })).toBe(1);
      expect(await s.tokenByHash({ hash: 'h_tok_revoked' })).toBeNull();
      expect(await s.tokensPrune({ before: now + 6_000, limit: 10 })).toBe(1);
      expect(await ids()).toEqual(['tok_future', 'tok_live']);
    });

    it("joining gives a machine its credential and revokes its earlier ones; a live machine's name is not taken", async () => {
      const s = store();
      const m = await s.machineRegister({ ...cpuMachine('joined'), now, credential: { id: 'tok_m1', hash: 'mh1' } });
      expect(await s.tokenByHash({ hash: 'mh1' })).toMatchObject({ kind: 'machine', machineId: m.id, revokedAt: null });
      await expect(s.machineRegister({ ...cpuMachine('joined'), now, credential: { id: 'tok_m2', hash: 'mh2' } })).rejects.toBeInstanceOf(ConflictError);
      expect(await s.tokenByHash({ hash: 'mh2' })).toBeNull();
      // Again without a credential (its agent, with its own): the same machine, its credential kept.
      expect((await s.machineRegister({ ...cpuMachine('joined'), now })).id).toBe(m.id);
      expect((await s.tokenByHash({ hash: 'mh1' }))!.revokedAt).toBeNull();
      await s.machinesReap({ now: now + 60_000, suspectAfterMs: 1000, lostAfterMs: 2000, jitter: 0.5 });
      expect((await s.machineRegister({ ...cpuMachine('joined'), now: now + 60_001, credential: { id: 'tok_m3', hash: 'mh3' } })).id).toBe(m.id);
      expect((await s.tokenByHash({ hash: 'mh1' }))!.revokedAt).toBe(now + 60_001);
      expect(await s.tokenByHash({ hash: 'mh3' })).toMatchObject({ machineId: m.id, revokedAt: null });
    });
  });
}
