/**
 * The protocol between agents and the control plane, at any timing: leases, heartbeats, lost
 * machines, retries with backoff, cancels, acknowledgement timeouts and the server's own restart
 * grace, driven by a fake clock through the real routes and passes (test/support/protocol-harness.ts).
 * No test here sleeps.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ProtocolHarness } from '../support/protocol-harness.js';

const oneStage = (name: string, over: object = {}) => ({ name, stages: [{ name: 'a', resources: { cpu: 1, memory: '64Mi' }, command: ['true'], ...over }] });

describe('the agent protocol, on a fake clock', () => {
  let h: ProtocolHarness;
  afterEach(async () => {
    await h?.close();
  });

  it('a lease renewed by heartbeats holds; one left to run out is lost, the stage runs again, and the late agent is told to kill', async () => {
    h = await ProtocolHarness.create();
    const m = await h.agent('m1');
    const id = await h.submit(oneStage('leased'));
    const [a] = await m.takeWork();
    expect(a).toBeDefined();
    // Heartbeats every few seconds keep it for far longer than one lease.
    for (let i = 0; i < 10; i++) {
      h.advance(h.config.leaseMs / 2);
      expect((await m.heartbeat()).kill).toEqual([]);
      await h.reconcile();
    }
    expect((await h.job(id)).stages[0]!.attempts.map((x) => x.state)).toEqual(['running']);
    // Silent (a frozen agent) past the lease and the loss deadline: the attempt is lost, the stage queued again.
    h.advance(h.config.lostAfterMs + 1);
    await h.reconcile();
    const j = await h.job(id);
    expect(j.stages[0]!.attempts.map((x) => x.state)).toEqual(['lost']);
    expect(j.stages[0]!.state).toBe('ready');
    // Waking up, the agent lists it: the answer says kill, and its report is refused.
    const hb = await m.heartbeat();
    expect(hb.kill.map((k) => k.attemptId)).toEqual([a!.attemptId]);
    expect((await m.finish(a!, 0)).result).toBe('stale');
    // The stage runs again, as attempt 2, and the job succeeds with it.
    const [b] = await m.takeWork();
    expect(b!.attemptNumber).toBe(2);
    expect((await m.finish(b!, 0)).result).toBe('ok');
    expect((await h.job(id)).state).toBe('succeeded');
  });

  it('a machine goes suspect, then lost, by its silence alone; a heartbeat brings it back', async () => {
    h = await ProtocolHarness.create();
    const m = await h.agent('m1');
    const machine = async () => (await h.cp.store.machineList()).find((x) => x.id === m.machineId)!.health;
    // Past the control plane's own start-up grace (it judges nothing for a loss period), alive until now.
    h.advance(h.config.lostAfterMs);
    await m.heartbeat();
    await h.reconcile();
    expect(await machine()).toBe('ready');
    h.advance(h.config.suspectAfterMs + 1);
    await h.reconcile();
    expect(await machine()).toBe('suspect');
    h.advance(h.config.lostAfterMs);
    await h.reconcile();
    expect(await machine()).toBe('lost');
    await m.heartbeat();
    expect(await machine()).toBe('ready');
  });

  it('a failed attempt waits out its backoff before it is placed again, whatever the passes in between', async () => {
    h = await ProtocolHarness.create();
    const m = await h.agent('m1');
    const id = await h.submit(oneStage('retried', { retry: { maxAttempts: 2, backoff: { initialSeconds: 30, maxSeconds: 30 } } }));
    const [a] = await m.takeWork();
    await m.finish(a!, 3);
    // 30 s of backoff (jitter fixed at the middle by the harness): nothing is placed before it.
    for (let t = 0; t < 10; t++) {
      h.advance(1000);
      expect(await m.takeWork()).toEqual([]);
    }
    h.advance(30_000);
    const [b] = await m.takeWork();
    expect(b!.attemptNumber).toBe(2);
    await m.finish(b!, 0);
    expect((await h.job(id)).state).toBe('succeeded');
  });

  it('cancel wins: the next heartbeat says kill, a later outcome is refused, nothing else starts', async () => {
    h = await ProtocolHarness.create();
    const m = await h.agent('m1');
    const id = await h.submit({
      name: 'canceled',
      stages: [
        { name: 'a', resources: { cpu: 1, memory: '64Mi' }, command: ['true'] },
        { name: 'b', needs: ['a'], resources: { cpu: 1, memory: '64Mi' }, command: ['true'] },
      ],
    });
    const [a] = await m.takeWork();
    await h.cancel(id);
    // A repeated cancel (a client retrying) answers the same and changes nothing.
    const again = await h.call('POST', `/v1/jobs/${id}/cancel`, {});
    expect([again.statusCode, (JSON.parse(again.body) as { changed: boolean }).changed]).toEqual([200, false]);
    expect((await m.heartbeat()).kill.map((k) => k.attemptId)).toEqual([a!.attemptId]);
    expect((await m.finish(a!, 0)).result).toBe('stale');
    expect(await m.takeWork()).toEqual([]);
    const j = await h.job(id);
    expect(j.state).toBe('canceled');
    expect(j.stages.map((s) => s.state)).toEqual(['canceled', 'canceled']);
  });

  it('an assignment never acknowledged is lost after the acknowledgement timeout, and placed again', async () => {
    h = await ProtocolHarness.create();
    const m = await h.agent('m1');
    const id = await h.submit(oneStage('unacked'));
    await h.schedule();
    const { assignments } = await m.heartbeat();
    expect(assignments).toHaveLength(1);
    // The agent never answers; it keeps heartbeating, so the machine itself stays ready.
    h.advance(h.config.ackTimeoutMs + 1);
    await m.heartbeat();
    await h.reconcile();
    const s = (await h.job(id)).stages[0]!;
    expect(s.attempts.map((x) => [x.state, x.reason])).toEqual([['lost', expect.stringMatching(/not acknowledged/)]]);
    expect(s.lostUsed).toBe(1);
    expect((await m.takeWork()).map((x) => x.attemptNumber)).toEqual([2]);
  });

  it("after the server's own restart nothing is judged for a full loss period: its silence was not the agents'", async () => {
    h = await ProtocolHarness.create();
    const m = await h.agent('m1');
    const id = await h.submit(oneStage('outage'));
    const [a] = await m.takeWork();
    // The server was down for an hour: a new control plane on the same data, the clock moved on.
    h.advance(3_600_000);
    await h.restart();
    await h.reconcile();
    expect((await h.job(id)).stages[0]!.attempts.map((x) => x.state)).toEqual(['running']);
    // The agent reconnects within the loss period and renews; the stage ends in its first attempt.
    h.advance(h.config.lostAfterMs / 2);
    await m.heartbeat();
    h.advance(h.config.lostAfterMs / 2 + 1);
    await h.reconcile();
    expect((await m.finish(a!, 0)).result).toBe('ok');
    expect((await h.job(id)).stages[0]!.attempts.map((x) => x.state)).toEqual(['succeeded']);
  });
});
