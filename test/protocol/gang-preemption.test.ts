/**
 * Preemption of and for gangs through the real scheduler pass and agent routes (issue 31,
 * docs/gangs.md "Preemption"), on a fake clock: a high-priority stage needing one machine of a
 * low-priority preemptible gang stops every member, each with the grace to checkpoint, and the gang
 * requeues and reruns later; a high-priority gang of 2 stops two low-priority stages at once. No
 * test here sleeps.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { AssignmentWire } from '../../src/api/contract/agent-protocol.js';
import { type FakeAgent, ProtocolHarness } from '../support/protocol-harness.js';

/** Every machine has 4 CPUs (the harness's agents): a stage of 4 fills one. */
const full = { cpu: 4, memory: '64Mi' };
const lowGang = {
  name: 'ddp',
  priority: 10,
  stages: [{ name: 'train', resources: { ...full, machines: 3 }, preemptible: true, preemptionGraceSeconds: 5, command: ['true'] }],
};

describe('gang preemption, through the agent protocol', () => {
  let h: ProtocolHarness;
  afterEach(async () => {
    await h?.close();
  });

  /** Each agent's heartbeat: what it was handed, acknowledged (the attempt runs). */
  const take = async (agents: FakeAgent[]): Promise<(AssignmentWire | undefined)[]> => {
    const out: (AssignmentWire | undefined)[] = [];
    for (const m of agents) {
      const { assignments } = await m.heartbeat();
      for (const a of assignments) await m.acknowledge(a);
      out.push(assignments[0]);
    }
    return out;
  };

  it('a high-priority stage needing one machine of a preemptible gang stops every member with the grace; the gang requeues and reruns', async () => {
    h = await ProtocolHarness.create();
    const agents = [await h.agent('m1'), await h.agent('m2'), await h.agent('m3')];
    const gangId = await h.submit(lowGang);
    await h.schedule();
    const first = (await take(agents)) as AssignmentWire[];
    expect(first.map((a) => a?.gang?.rank)).toEqual([0, 1, 2]);

    h.advance(60_000);
    const hiId = await h.submit({ name: 'urgent', priority: 900, stages: [{ name: 'eval', resources: full, command: ['true'] }] });
    await h.schedule();
    // Every member is told to stop, with the stage's grace to checkpoint; the member on the
    // machine the stage needed (m1, first by name) is the one preempted, the others end with it.
    const kills = [];
    for (const m of agents) kills.push(...(await m.heartbeat()).kill);
    expect(kills).toEqual([
      {
        attemptId: first[0]!.attemptId,
        reason: expect.stringMatching(/^attempt is preempted: preempted on m1 for stage eval of job .* \(priority 900 over 10\)$/),
        graceMs: 5000,
      },
      ...[1, 2].map((i) => ({
        attemptId: first[i]!.attemptId,
        reason: expect.stringMatching(/^attempt is preempted: gang member rank 0 preempted on m1 for stage eval .*: ending ranks 1, 2$/),
        graceMs: 5000,
      })),
    ]);
    let gang = (await h.job(gangId)).stages[0]!;
    expect([gang.state, gang.attemptsUsed, gang.attempts.map((a) => a.state)]).toEqual(['ready', 0, ['preempted', 'preempted', 'preempted']]);

    // The members stop within their grace; their agents report them (refused: already ended) and
    // stop listing them, which releases their room; the high stage is placed there.
    for (const [i, m] of agents.entries()) expect((await m.finish(first[i]!, 143)).result).toBe('stale');
    for (const m of agents) await m.heartbeat();
    await h.schedule();
    const second = await take(agents);
    const eval0 = second.find((a) => a !== undefined)!;
    expect(second.filter((a) => a !== undefined)).toHaveLength(1);
    expect(eval0.gang).toBeUndefined();
    // The gang waits for the whole set (its grace has passed, one machine is busy).
    h.advance(6000);
    await h.schedule();
    expect((await take(agents)).every((a) => a === undefined)).toBe(true);

    // The high stage ends: the gang is placed again, a second attempt, and succeeds.
    const evalAgent = agents[second.indexOf(eval0)]!;
    expect((await evalAgent.finish(eval0, 0)).result).toBe('ok');
    await evalAgent.heartbeat();
    await h.schedule();
    const rerun = (await take(agents)) as AssignmentWire[];
    expect(rerun.map((a) => [a.attemptNumber, a.gang?.rank])).toEqual([
      [2, 0],
      [2, 1],
      [2, 2],
    ]);
    for (const [i, a] of rerun.entries()) expect((await agents[i]!.finish(a, 0)).result).toBe('ok');
    gang = (await h.job(gangId)).stages[0]!;
    // The preemption charged no retry.
    expect([gang.state, gang.attemptsUsed]).toEqual(['succeeded', 0]);
    expect((await h.job(hiId)).state).toBe('succeeded');
  });

  it('a high-priority gang of 2 stops two low-priority stages at once, and runs on their machines', async () => {
    h = await ProtocolHarness.create();
    const agents = [await h.agent('m1'), await h.agent('m2'), await h.agent('m3')];
    const low = { priority: 10, stages: [{ name: 'work', resources: full, preemptible: true, preemptionGraceSeconds: 5, command: ['true'] }] };
    const lowIds = [await h.submit({ name: 'low-a', ...low }), await h.submit({ name: 'low-b', ...low })];
    await h.schedule();
    const lows = await take(agents);
    // The third machine runs work that is not preemptible.
    await h.submit({ name: 'firm', priority: 10, stages: [{ name: 'work', resources: full, command: ['true'] }] });
    await h.schedule();
    const firm = await take(agents);
    const lowAt = lows.flatMap((a, i) => (a ? [i] : []));
    const firmAt = firm.findIndex((a) => a !== undefined);
    expect(lowAt).toHaveLength(2);
    expect(lowAt).not.toContain(firmAt);

    h.advance(60_000);
    const gangId = await h.submit({ name: 'ddp', priority: 900, stages: [{ name: 'train', resources: { ...full, machines: 2 }, command: ['true'] }] });
    await h.schedule();
    for (const [i, m] of agents.entries()) {
      const { kill } = await m.heartbeat();
      if (i === firmAt) expect(kill).toEqual([]);
      else
        expect(kill).toEqual([
          {
            attemptId: lows[i]!.attemptId,
            reason: expect.stringMatching(
              new RegExp(`^attempt is preempted: preempted on m${i + 1} for stage train of job .* \\(gang of 2, priority 900 over 10\\)$`),
            ),
            graceMs: 5000,
          },
        ]);
    }
    // Each victim's event names the gang it was stopped for.
    for (const id of lowIds) {
      const { events } = JSON.parse((await h.call('GET', `/v1/jobs/${id}/events`)).body) as { events: { type: string; message: string }[] };
      expect(events.filter((e) => e.type === 'attempt:preempted').map((e) => e.message)).toEqual([
        expect.stringMatching(/^stage work attempt 1 preempted on m\d for stage train of job .* \(gang of 2, priority 900 over 10\); 5 s to checkpoint$/),
      ]);
    }
    for (const i of lowAt) {
      expect((await agents[i]!.finish(lows[i]!, 143)).result).toBe('stale');
      await agents[i]!.heartbeat();
    }
    await h.schedule();
    const members = await take(agents);
    expect(lowAt.map((i) => members[i]?.gang?.rank)).toEqual([0, 1]);
    expect(members[firmAt]).toBeUndefined();
    for (const i of lowAt) expect((await agents[i]!.finish(members[i]!, 0)).result).toBe('ok');
    expect((await h.job(gangId)).state).toBe('succeeded');
  });
});
