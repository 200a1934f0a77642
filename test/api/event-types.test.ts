import { afterAll, describe, expect, it } from 'vitest';
import { EVENT_TYPES } from '../../src/api/contract/event-types.js';
import { ProtocolHarness } from '../support/protocol-harness.js';

/**
 * The contract lists every event type (src/api/contract/event-types.ts), and clients follow states
 * by them: a workload through the real routes and passes, on a fake clock, writes only listed types.
 */
describe('event types', () => {
  let h: ProtocolHarness;
  afterAll(async () => {
    await h?.close();
  });

  it('every event the server writes has a type the contract lists', async () => {
    h = await ProtocolHarness.create();
    const stage = (name: string, over: object = {}) => ({ name, resources: { cpu: 1, memory: '64Mi' }, command: ['true'], ...over });
    const m = await h.agent('m1');
    // A job that succeeds, one that fails (its second stage skipped), one canceled while running.
    await h.submit({ name: 'ok', stages: [stage('a')] });
    await h.submit({ name: 'bad', stages: [stage('a', { retry: { maxAttempts: 1 } }), stage('b', { needs: ['a'] })] });
    const canceled = await h.submit({ name: 'stop', stages: [stage('a')] });
    const work = await m.takeWork();
    expect(work).toHaveLength(3);
    for (const a of work) {
      if (a.jobId === canceled) continue;
      await m.finish(a, a.stageName === 'a' && (await h.job(a.jobId)).name === 'bad' ? 3 : 0);
    }
    await h.cancel(canceled);
    await m.heartbeat();
    // A machine that goes silent: suspect, lost, then back.
    h.advance(h.config.lostAfterMs);
    await m.heartbeat();
    h.advance(h.config.suspectAfterMs + 1);
    await h.reconcile();
    h.advance(h.config.lostAfterMs);
    await h.reconcile();
    await m.heartbeat();
    // An operator's verbs on machines, teams and tokens.
    for (const verb of ['cordon', 'uncordon', 'drain']) expect((await h.call('POST', `/v1/machines/m1/${verb}`)).statusCode).toBe(200);
    expect((await h.call('POST', '/v1/teams', { name: 'vision' })).statusCode).toBe(201);
    const token = (await h.call('POST', '/v1/tokens', { kind: 'team', team: 'vision', name: 'ci' })).json().info.id as string;
    expect((await h.cp.app.inject({ method: 'DELETE', url: `/v1/tokens/${token}`, headers: { authorization: `Bearer ${h.tokens.admin}` } })).statusCode).toBe(
      200,
    );

    const events = await h.cp.store.eventsList({ afterSeq: 0, limit: 10_000 });
    const seen = new Set(events.map((e) => e.type));
    const listed = new Set<string>(EVENT_TYPES);
    expect([...seen].filter((t) => !listed.has(t))).toEqual([]);
    // The workload reaches most kinds, so the check above has something to check.
    for (const t of [
      'job:succeeded',
      'job:failed',
      'job:canceled',
      'job:cancel-requested',
      'stage:skipped',
      'attempt:failed',
      'attempt:canceled',
      'machine:lost',
      'machine:cordoned',
      'team:created',
      'token:revoked',
    ]) {
      expect(seen).toContain(t);
    }
  });
});
