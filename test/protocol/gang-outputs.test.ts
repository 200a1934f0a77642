/**
 * A gang's outputs through the real agent routes (issue 31, docs/gangs.md "Outputs"), on a fake
 * clock: each member uploads its files as an agent does, the last member's success commits every
 * rank's under rank-N/ (`outputs: { ranks: all }`), and the downstream stage is handed them as its
 * inputs and downloads rank 1's and rank 2's files as its agent would into
 * GANTRY_INPUT_DIR/train/rank-N/; by default only rank 0's files are the stage's.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { AssignmentWire } from '../../src/api/contract/agent-protocol.js';
import { type FakeAgent, ProtocolHarness } from '../support/protocol-harness.js';
import { bearer } from '../support/tokens.js';

const spec = (outputs?: object) => ({
  name: 'ddp',
  stages: [
    { name: 'train', resources: { cpu: 1, memory: '64Mi', machines: 3 }, ...(outputs ? { outputs } : {}), command: ['true'] },
    { name: 'eval', needs: ['train'], resources: { cpu: 1, memory: '64Mi' }, command: ['true'] },
  ],
});
/** What each rank leaves in its GANTRY_OUTPUT_DIR. */
const FILES: Record<string, string>[] = [
  { 'model.pt': 'weights of rank 0' },
  { 'metrics.json': '{"rank":1}', 'ckpt/shard.bin': 'shard one' },
  { 'ckpt/shard.bin': 'shard two' },
];

describe("a gang's outputs, through the agent protocol", () => {
  let h: ProtocolHarness;
  afterEach(async () => {
    await h?.close();
  });

  const inject = (agent: FakeAgent, method: 'GET' | 'PUT', url: string, payload?: string) =>
    h.cp.app.inject({
      method,
      url,
      headers: { ...bearer(agent.credential), ...(payload !== undefined ? { 'content-type': 'application/octet-stream' } : {}) },
      ...(payload !== undefined ? { payload } : {}),
    });

  /** Runs the gang to success: each member uploads its files (as its agent does, fenced by its token) and reports them. */
  const runGang = async (agents: FakeAgent[]): Promise<AssignmentWire[]> => {
    const members: AssignmentWire[] = [];
    for (const m of agents) {
      const work = await m.takeWork();
      expect(work).toHaveLength(1);
      members.push(work[0]!);
    }
    for (const [rank, a] of members.entries()) {
      const files = Object.entries(FILES[rank]!);
      for (const [path, text] of files) {
        const up = await h.cp.app.inject({
          method: 'PUT',
          url: `/v1/agent/attempts/${a.attemptId}/outputs/${path}`,
          headers: { ...bearer(agents[rank]!.credential), 'content-type': 'application/octet-stream', 'x-gantry-token': String(a.token) },
          payload: text,
        });
        expect(up.statusCode).toBe(204);
      }
      agents[rank]!.running.delete(a.attemptId);
      const outputs = files.map(([path, text]) => ({ path, size: Buffer.byteLength(text) }));
      const r = await agents[rank]!.report({
        completed: [{ attemptId: a.attemptId, token: a.token, exitCode: 0, signal: null, reason: null, end: { kind: 'exited', detail: null }, outputs }],
      });
      expect(r.completed[0]!.result).toBe('ok');
    }
    return members;
  };

  /** The downstream stage placed: the agent it was handed to and its assignment. */
  const placeEval = async (agents: FakeAgent[]): Promise<{ agent: FakeAgent; a: AssignmentWire }> => {
    // Ended members are released once their agents stop listing them.
    for (const m of agents) await m.heartbeat();
    await h.schedule();
    for (const agent of agents) {
      const { assignments } = await agent.heartbeat();
      if (assignments.length) {
        await agent.acknowledge(assignments[0]!);
        return { agent, a: assignments[0]! };
      }
    }
    throw new Error('eval was not placed');
  };

  it("ranks: all: every rank's files committed under rank-N/, handed downstream, downloaded by its machine and listed by the stage", async () => {
    h = await ProtocolHarness.create();
    const agents = [await h.agent('m1'), await h.agent('m2'), await h.agent('m3')];
    const id = await h.submit(spec({ ranks: 'all' }));
    const members = await runGang(agents);
    const train = (await h.job(id)).stages[0]!;
    expect(train.state).toBe('succeeded');
    const committed = ['rank-0/model.pt', 'rank-1/ckpt/shard.bin', 'rank-1/metrics.json', 'rank-2/ckpt/shard.bin'];
    expect(train.outputs!.map((o) => o.path)).toEqual(committed);

    const { agent, a } = await placeEval(agents);
    expect(a.stageName).toBe('eval');
    // Its inputs: the upstream's files, as the agent lays them out under GANTRY_INPUT_DIR/train/.
    expect(a.inputs).toEqual([
      {
        stage: 'train',
        attemptId: members[0]!.attemptId,
        files: committed.map((path) => ({ path, size: Buffer.byteLength(text(path)) })),
      },
    ]);
    // Downloaded as its agent does, by the committing attempt (rank 0's) and the file's path.
    for (const path of ['rank-1/ckpt/shard.bin', 'rank-1/metrics.json', 'rank-2/ckpt/shard.bin']) {
      const r = await inject(agent, 'GET', `/v1/agent/artifacts/${members[0]!.attemptId}/${path}`);
      expect([r.statusCode, r.body]).toEqual([200, text(path)]);
    }
    // A rank's own attempt id names nothing committed: the stage's files are read through the attempt that committed them.
    expect((await inject(agent, 'GET', `/v1/agent/artifacts/${members[2]!.attemptId}/ckpt/shard.bin`)).statusCode).toBe(404);
    // As `gantry outputs JOB train` downloads them.
    const user = await h.call('GET', `/v1/jobs/${id}/stages/train/outputs/rank-2/ckpt/shard.bin`);
    expect([user.statusCode, user.body]).toEqual([200, 'shard two']);
  });

  it("by default only rank 0's files are the stage's, at their own paths", async () => {
    h = await ProtocolHarness.create();
    const agents = [await h.agent('m1'), await h.agent('m2'), await h.agent('m3')];
    const id = await h.submit(spec());
    const members = await runGang(agents);
    expect((await h.job(id)).stages[0]!.outputs!.map((o) => o.path)).toEqual(['model.pt']);
    const { agent, a } = await placeEval(agents);
    expect(a.inputs).toEqual([{ stage: 'train', attemptId: members[0]!.attemptId, files: [{ path: 'model.pt', size: 17 }] }]);
    expect((await inject(agent, 'GET', `/v1/agent/artifacts/${members[0]!.attemptId}/rank-1/metrics.json`)).statusCode).toBe(404);
    expect((await inject(agent, 'GET', `/v1/agent/artifacts/${members[0]!.attemptId}/ckpt/shard.bin`)).statusCode).toBe(404);
  });

  it('refuses outputs.ranks on a stage of one machine at submit, at its path', async () => {
    h = await ProtocolHarness.create();
    const r = await h.call('POST', '/v1/jobs', { name: 'one', stages: [{ name: 'train', outputs: { ranks: 'all' }, command: ['true'] }] });
    expect(r.statusCode).toBe(400);
    expect(r.body).toContain('/stages/0/outputs/ranks');
    expect(r.body).toContain('only a gang stage (resources.machines 2 or more) has ranks');
  });
});

/** A committed path's content: rank N's file of FILES. */
function text(path: string): string {
  const [, rank, rest] = /^rank-(\d+)\/(.*)$/.exec(path)!;
  return FILES[Number(rank)]![rest!]!;
}
