/**
 * A gang seen as one and as parts (issue 31, docs/gangs.md), through the real routes on a fake
 * clock: the job's view carries each member's rank and the stage's members, a member's log is
 * read by its rank (or all, each line said whose), explain says what set of machines a gang
 * lacks, and the metrics count gangs waiting and the GPUs held for them.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { AssignmentWire, RegisterResponse } from '../../src/api/contract/agent-protocol.js';
import type { LogChunkView, StageExplanation } from '../../src/api/contract/job-view.js';
import { rankFollowState } from '../../src/api/contract/log-follow.js';
import { FakeAgent, ProtocolHarness } from '../support/protocol-harness.js';

const gang = (gpus = 0) => ({
  name: 'ddp',
  stages: [{ name: 'train', resources: { cpu: 1, memory: '64Mi', machines: 3, ...(gpus ? { gpu: { count: gpus, type: 'h100' } } : {}) }, command: ['true'] }],
});

describe('a gang seen as one and as parts', () => {
  let h: ProtocolHarness;
  afterEach(async () => {
    await h?.close();
  });

  /** An agent with `gpus` h100 GPUs declared (the harness's own agents have none). */
  const gpuAgent = async (name: string, gpus: number): Promise<FakeAgent> => {
    const r = await h.call(
      'POST',
      '/v1/agent/register',
      {
        name,
        cpuMillis: 4000,
        memoryBytes: 8 * 2 ** 30,
        gpus: Array.from({ length: gpus }, (_, index) => ({ index, uuid: null, name: 'NVIDIA H100', type: 'h100', memoryMiB: 81_559 })),
        gpusDeclared: true,
        region: null,
        labels: {},
        agent: { version: 'harness', host: 'harness', pid: 1 },
      },
      h.tokens.join,
    );
    expect(r.statusCode).toBe(200);
    const res = JSON.parse(r.body) as RegisterResponse;
    return new FakeAgent(h, res.machineId, res.credential!);
  };
  const explain = async (id: string, stage = 'train') => JSON.parse((await h.call('GET', `/v1/jobs/${id}/stages/${stage}/explain`)).body) as StageExplanation;
  const logs = (id: string, q: string, stage = 'train') => h.call('GET', `/v1/jobs/${id}/stages/${stage}/logs${q}`);
  const metric = async (name: string): Promise<string[]> => {
    const text = (await h.call('GET', '/metrics')).body;
    return text.split('\n').filter((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`));
  };

  it("lists each member's machine, GPUs and state; reads each member's log by rank; explains a gang's wait by the set it lacks", async () => {
    h = await ProtocolHarness.create();
    const agents = [await h.agent('m1'), await h.agent('m2')];
    const id = await h.submit(gang());
    await h.schedule();
    // Two machines for a gang of three: the reason is the gang's, in status and explain alike.
    const waiting = await explain(id);
    expect(waiting.reason).toBe('needs 3 machines with 1 CPU, 64Mi: only 2 could run a member even idle');
    expect(waiting.gang).toEqual({ size: 3, sameLabel: null });
    // One member's changes ("1 machine could run it") say nothing of a gang.
    expect(waiting.suggestions).toEqual([]);
    const before = (await h.job(id)).stages[0]!;
    expect([before.pendingReason, before.resources.machines, before.members]).toEqual([waiting.reason, 3, undefined]);
    expect(await metric('gantry_gangs_waiting')).toEqual(['gantry_gangs_waiting{pool="cpu"} 1']);

    agents.push(await h.agent('m3'));
    await h.schedule();
    const handed: AssignmentWire[] = [];
    for (const a of agents) {
      const { assignments } = await a.heartbeat();
      await a.acknowledge(assignments[0]!);
      handed.push(assignments[0]!);
    }
    const s = (await h.job(id)).stages[0]!;
    expect(s.attempts.map((a) => [a.number, a.gangRank, a.gangSize, a.machine])).toEqual([
      [1, 0, 3, 'm1'],
      [1, 1, 3, 'm2'],
      [1, 2, 3, 'm3'],
    ]);
    expect(s.members!.map((m) => [m.rank, m.machine, m.state, m.attemptId])).toEqual(handed.map((a, r) => [r, `m${r + 1}`, 'running', a.attemptId]));
    expect((await explain(id)).reason).toBe('running on m1, m2, m3 (gang of 3) (attempt 1)');
    // A scrape reads the database again past half a second (metrics.ts shares one read per scrape).
    h.advance(1_000);
    expect(await metric('gantry_gangs_waiting')).toEqual(['gantry_gangs_waiting{pool="cpu"} 0']);

    // Each member ships its own log; rank 2's first, then 0's, then 1's second line.
    const ship = async (r: number, offset: number, data: string) => {
      const res = await h.call(
        'POST',
        `/v1/agent/attempts/${handed[r]!.attemptId}/logs`,
        { token: handed[r]!.token, chunks: [{ stream: 'stdout', offset, bytes: data.length, data }] },
        agents[r]!.credential,
      );
      expect(res.statusCode).toBe(200);
    };
    await ship(2, 0, 'two\n');
    await ship(0, 0, 'zero\n');
    await ship(1, 0, 'one ');
    await ship(1, 4, 'half\n');
    expect((await logs(id, '')).body).toBe('zero\n');
    expect((await logs(id, '?rank=2')).body).toBe('two\n');
    // All: in the order stored, each line said whose once (rank 1's line came in two chunks).
    expect((await logs(id, '?rank=all')).body).toBe('[rank 2] two\n[rank 0] zero\n[rank 1] one half\n');
    const json = JSON.parse((await logs(id, '?rank=all&format=json')).body) as { chunks: LogChunkView[] };
    expect(json.chunks.map((c) => [c.rank, c.attemptNumber, c.data])).toEqual([
      [2, 1, 'two\n'],
      [0, 1, 'zero\n'],
      [1, 1, 'one '],
      [1, 1, 'half\n'],
    ]);
    const beyond = await logs(id, '?rank=3');
    expect([beyond.statusCode, JSON.parse(beyond.body).message]).toEqual([404, `stage train of job ${id} is a gang of 3: its ranks are 0 to 2`]);
    expect((await logs(id, '?rank=two')).statusCode).toBe(400);

    // Followed: a member's log ends once its own process is gone; all members', once every one's is.
    for (const [r, a] of agents.entries()) expect((await a.finish(handed[r]!, 0)).result).toBe('ok');
    const followed = async (q: string) => {
      const r = await h.cp.app.inject({
        method: 'GET',
        url: `/v1/jobs/${id}/stages/train/logs${q}&follow=1`,
        headers: { authorization: `Bearer ${h.tokens.admin}` },
      });
      return r.body
        .split('\n\n')
        .filter((m) => m.includes('event: chunk') || m.includes('event: end'))
        .map((m) =>
          m
            .split('\n')
            .find((l) => l.startsWith('data: '))!
            .slice(6),
        );
    };
    expect(await followed('?rank=1')).toEqual([
      expect.stringContaining('"rank":1,"stream":"stdout","at"'),
      expect.stringContaining('"data":"half\\n"'),
      '{"attempt":1,"state":"succeeded"}',
    ]);
    expect(rankFollowState((await h.job(id)).stages[0]!, undefined, 'all', (a) => a.gangRank ?? 0).ended).toBe(true);
    expect((await followed('?rank=all')).map((d) => (JSON.parse(d) as { rank?: number }).rank ?? 'end')).toEqual([2, 0, 1, 1, 'end']);

    // Not a gang: its only rank is 0.
    const plain = await h.submit({ name: 'one', stages: [{ name: 'a', resources: { cpu: 64 }, command: ['true'] }] });
    const r1 = await logs(plain, '?rank=1', 'a');
    expect([r1.statusCode, JSON.parse(r1.body).message]).toEqual([404, `stage a of job ${plain} is not a gang: its only rank is 0`]);
    expect((await explain(plain, 'a')).gang).toBeUndefined();
  });

  it('counts the GPUs a pass holds for a gang that waits for busy GPUs', async () => {
    h = await ProtocolHarness.create();
    const agents = [await gpuAgent('g1', 1), await gpuAgent('g2', 1), await gpuAgent('g3', 1)];
    // One GPU taken on g1 by an ordinary stage; the gang of 3 × 1 GPU then waits for it.
    const single = await h.submit({
      name: 'one',
      stages: [{ name: 'a', resources: { cpu: 1, memory: '64Mi', gpu: { count: 1, type: 'h100' } }, command: ['true'] }],
    });
    const [busy] = await agents[0]!.takeWork();
    expect(busy).toBeDefined();
    const id = await h.submit(gang(1));
    await h.schedule();
    expect((await explain(id)).reason).toBe('needs 3 machines with 1 free h100 GPU: 2 have them');
    expect(await metric('gantry_gangs_waiting')).toEqual(['gantry_gangs_waiting{pool="gpu:h100"} 1']);
    // Its whole set is held: one GPU on each of the three machines.
    expect(await metric('gantry_gang_reserved_gpus')).toEqual(['gantry_gang_reserved_gpus 3']);
    // The single stage ends; the next pass places the gang and holds nothing.
    expect((await agents[0]!.finish(busy!, 0)).result).toBe('ok');
    await agents[0]!.heartbeat();
    await h.schedule();
    expect((await h.job(single)).state).toBe('succeeded');
    expect((await h.job(id)).stages[0]!.members).toHaveLength(3);
    expect(await metric('gantry_gang_reserved_gpus')).toEqual(['gantry_gang_reserved_gpus 0']);
  });
});
