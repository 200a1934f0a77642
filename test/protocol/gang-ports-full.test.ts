/**
 * A gang whose rank 0's machine has no gang port left (docs/gangs.md, "Rendezvous"): the planner
 * has room for it, so its live reason is none, but `planApply` skips it; status and explain say
 * why (the store keeps the skip's reason on the stage) until a port frees and it is placed. Played
 * through the real scheduler pass and routes on a fake clock.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { StageExplanation } from '../../src/api/contract/job-view.js';
import { ProtocolHarness } from '../support/protocol-harness.js';

const gang = (name: string) => ({
  name,
  stages: [{ name: 'train', resources: { cpu: 1, memory: '64Mi', machines: 2 }, command: ['true'] }],
});

describe('a gang skipped for want of a gang port', () => {
  let h: ProtocolHarness;
  afterEach(async () => {
    await h?.close();
  });

  it('says so in status and explain while it waits, and runs once the port is free again', async () => {
    h = await ProtocolHarness.create();
    // m1 (rank 0: ranks follow names) keeps one port for gangs.
    const agents = [await h.agent('m1', 4, { gangPorts: { first: 40000, last: 40000 } }), await h.agent('m2')];
    const first = await h.submit(gang('first'));
    await h.schedule();
    expect((await h.job(first)).stages[0]!.state).toBe('scheduled');
    const second = await h.submit(gang('second'));
    await h.schedule();
    const why = 'gang rank 0 on m1: no free gang port in 40000-40000';
    const stage = (await h.job(second)).stages[0]!;
    expect([stage.state, stage.pendingReason]).toEqual(['ready', why]);
    const explained = JSON.parse((await h.call('GET', `/v1/jobs/${second}/stages/train/explain`)).body) as StageExplanation;
    expect(explained.reason).toBe(why);

    // The first gang's members run and succeed; their agents list them no more, so they are released: the port is the second's.
    for (const a of agents) for (const x of (await a.heartbeat()).assignments) await a.acknowledge(x);
    for (const a of agents) for (const x of [...a.running.values()]) expect((await a.finish(x, 0)).result).toBe('ok');
    for (const a of agents) await a.heartbeat();
    expect((await h.job(first)).stages[0]!.state).toBe('succeeded');
    await h.schedule();
    const placed = (await h.job(second)).stages[0]!;
    expect([placed.state, placed.pendingReason]).toEqual(['scheduled', null]);
  });

  it("rank 0's agent finding the port held by another process: the gang ends once, a spawn failure saying why, not retried", async () => {
    h = await ProtocolHarness.create();
    const agents = [await h.agent('m1'), await h.agent('m2')];
    const id = await h.submit(gang('ddp'));
    await h.schedule();
    const handed = [];
    for (const a of agents) for (const x of (await a.heartbeat()).assignments) handed.push({ a, x });
    expect(handed.map(({ x }) => x.gang?.rank)).toEqual([0, 1]);
    const [rank0, rank1] = handed;
    await rank1!.a.acknowledge(rank1!.x);
    // What gang-port-check.ts makes of it on rank 0's machine (the agent's side: agent.test.ts).
    const why = `spawn failed: gang master port ${rank0!.x.gang!.masterPort} on harness is in use by another process (--gang-ports)`;
    expect((await rank0!.a.finish(rank0!.x, null, { reason: why, end: { kind: 'spawn-failed', detail: why } })).result).toBe('ok');
    const s = (await h.job(id)).stages[0]!;
    expect(s.state).toBe('failed');
    expect(s.endReason).toContain('gang master port');
    // One attempt (both members), the other member ended with it; the next heartbeat kills it.
    expect(s.attempts.map((a) => [a.gangRank, a.state])).toEqual([
      [0, 'failed'],
      [1, 'canceled'],
    ]);
    expect((await rank1!.a.heartbeat()).kill).toEqual([expect.objectContaining({ attemptId: rank1!.x.attemptId })]);
  });
});
