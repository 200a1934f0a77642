/**
 * A gang stage through the real scheduler pass and agent routes (issue 31, docs/gangs.md), on a
 * fake clock: every member handed to its own agent with the rendezvous, one member failing ends
 * the others through their kill lists and the retry places the gang again; a cancel kills every
 * member. No test here sleeps.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { AssignmentWire } from '../../src/api/contract/agent-protocol.js';
import { type FakeAgent, ProtocolHarness } from '../support/protocol-harness.js';

const gangJob = { name: 'ddp', stages: [{ name: 'train', resources: { cpu: 1, memory: '64Mi', machines: 3 }, command: ['true'] }] };

describe('a gang stage, through the agent protocol', () => {
  let h: ProtocolHarness;
  afterEach(async () => {
    await h?.close();
  });

  /** One pass, then each agent's heartbeat: what it was handed (acknowledged). */
  const placeGang = async (agents: FakeAgent[]): Promise<AssignmentWire[]> => {
    await h.schedule();
    const out: AssignmentWire[] = [];
    for (const m of agents) {
      const { assignments } = await m.heartbeat();
      expect(assignments).toHaveLength(1);
      await m.acknowledge(assignments[0]!);
      out.push(assignments[0]!);
    }
    return out;
  };

  it('hands each member to its machine with the rendezvous; a member failing ends the others, charged once; the retry succeeds', async () => {
    h = await ProtocolHarness.create();
    const agents = [await h.agent('m1'), await h.agent('m2'), await h.agent('m3')];
    const id = await h.submit(gangJob);
    const first = await placeGang(agents);
    // Ranks follow the machines' names; rank 0's agent registered its host as 'harness' and no gang
    // ports: the lowest of the default range is reserved.
    expect(first.map((a) => [a.attemptNumber, a.gang])).toEqual([0, 1, 2].map((rank) => [1, { rank, size: 3, masterAddr: 'harness', masterPort: 29500 }]));
    expect((await h.job(id)).stages[0]!.state).toBe('running');

    expect((await agents[1]!.finish(first[1]!, 1)).result).toBe('ok');
    for (const i of [0, 2]) {
      const { kill } = await agents[i]!.heartbeat();
      expect(kill).toEqual([{ attemptId: first[i]!.attemptId, reason: expect.stringContaining('gang member rank 1 failed') }]);
      // Killed, its agent reports it: refused, nothing charged again.
      expect((await agents[i]!.finish(first[i]!, 137)).result).toBe('stale');
    }
    let s = (await h.job(id)).stages[0]!;
    expect([s.state, s.attemptsUsed]).toEqual(['ready', 1]);
    expect(s.attempts.map((a) => a.state)).toEqual(['canceled', 'failed', 'canceled']);

    // Past the retry's backoff, the whole gang is placed again, and succeeds once every member has.
    h.advance(60_000);
    for (const m of agents) await m.heartbeat();
    const second = await placeGang(agents);
    // The first attempt's port is free again (its agents stopped listing its members): the retry reserves it.
    expect(second.map((a) => [a.attemptNumber, a.gang?.rank, a.gang?.masterPort])).toEqual([
      [2, 0, 29500],
      [2, 1, 29500],
      [2, 2, 29500],
    ]);
    for (const [i, a] of second.entries()) expect((await agents[i]!.finish(a, 0)).result).toBe('ok');
    const j = await h.job(id);
    s = j.stages[0]!;
    expect([j.state, s.state, s.attemptsUsed]).toEqual(['succeeded', 'succeeded', 1]);
  });

  it("meets at rank 0's advertised address and a port of its registered range; a range backwards or an address with a space is refused at registration", async () => {
    h = await ProtocolHarness.create();
    const register = (name: string, agent: object) =>
      h.call(
        'POST',
        '/v1/agent/register',
        {
          name,
          cpuMillis: 4000,
          memoryBytes: 2 ** 33,
          gpus: [],
          gpusDeclared: false,
          region: null,
          labels: {},
          agent: { version: 'x', host: 'h', pid: 1, ...agent },
        },
        h.tokens.join,
      );
    const backwards = await register('m0', { gangPorts: { first: 40010, last: 40000 } });
    expect([backwards.statusCode, backwards.body]).toEqual([400, expect.stringContaining('/agent/gangPorts')]);
    expect(backwards.body).toContain('first (40010) is after last (40000)');
    expect((await register('m0', { advertiseAddr: 'node a' })).statusCode).toBe(400);

    const agents = [await h.agent('m1', 4, { advertiseAddr: '10.1.0.7', gangPorts: { first: 40000, last: 40009 } }), await h.agent('m2'), await h.agent('m3')];
    await h.submit(gangJob);
    const members = await placeGang(agents);
    expect(members.map((a) => a.gang)).toEqual([0, 1, 2].map((rank) => ({ rank, size: 3, masterAddr: '10.1.0.7', masterPort: 40000 })));
  });

  it('a cancel kills every member', async () => {
    h = await ProtocolHarness.create();
    const agents = [await h.agent('m1'), await h.agent('m2'), await h.agent('m3')];
    const id = await h.submit(gangJob);
    const members = await placeGang(agents);
    await h.cancel(id);
    for (const [i, m] of agents.entries()) expect((await m.heartbeat()).kill.map((k) => k.attemptId)).toEqual([members[i]!.attemptId]);
    expect((await h.job(id)).state).toBe('canceled');
  });
});
