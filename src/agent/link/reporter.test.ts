import { describe, expect, it } from 'vitest';
import type { CompletedItem, ReportRequest, ReportResponse } from '../../api/contract/agent-protocol.js';
import { AgentHttpError, UnknownMachine } from './agent-client.js';
import { Reporter, Undeliverable } from './reporter.js';
import { fakeAssignment } from '../../../test/support/fake-agent-server.js';

/** A send whose every call waits until the test answers it. */
function fakeServer() {
  const calls: { req: ReportRequest; answer: (r?: ReportResponse | Error) => void }[] = [];
  let waiters: (() => void)[] = [];
  const send = (req: ReportRequest) =>
    new Promise<ReportResponse>((resolve, reject) => {
      calls.push({
        req,
        answer: (r) => {
          if (r instanceof Error) reject(r);
          else resolve(r ?? okAll(req));
        },
      });
      for (const w of waiters.splice(0)) w();
    });
  const nextCall = async (n: number) => {
    while (calls.length < n) await new Promise<void>((r) => waiters.push(r));
    return calls[n - 1]!;
  };
  return { calls, send, nextCall, reset: () => (waiters = []) };
}

const okAll = (req: ReportRequest): ReportResponse => ({
  started: req.started.map((s) => ({ attemptId: s.attemptId, result: 'ok' })),
  completed: req.completed.map((c) => ({ attemptId: c.attemptId, result: 'ok', jobState: 'running' })),
});

const outcome = (attemptId: string): CompletedItem => ({ attemptId, token: 1, exitCode: 0, signal: null, reason: null, outputs: [] });

function reporter(
  send: (req: ReportRequest) => Promise<ReportResponse>,
  over: {
    now?: () => number;
    giveUpMs?: number;
    onUnknownMachine?: () => Promise<boolean>;
    pidDelayMs?: number;
    onAssignments?: (a: NonNullable<ReportResponse['assignments']>) => void;
    coming?: () => number;
    gatherMs?: number;
    maxInFlight?: number;
  } = {},
) {
  const halt = new AbortController();
  const r = new Reporter({
    send,
    onUnknownMachine: over.onUnknownMachine ?? (async () => true),
    signal: halt.signal,
    now: over.now ?? (() => Date.now()),
    retry: { baseMs: 1, maxMs: 5 },
    giveUpMs: over.giveUpMs ?? 60_000,
    pidDelayMs: over.pidDelayMs ?? 0,
    ...(over.onAssignments ? { onAssignments: over.onAssignments } : {}),
    ...(over.coming ? { coming: over.coming } : {}),
    ...(over.gatherMs !== undefined ? { gatherMs: over.gatherMs } : {}),
    ...(over.maxInFlight !== undefined ? { maxInFlight: over.maxInFlight } : {}),
  });
  return { r, halt };
}

const unavailable = () => new AgentHttpError(503, 'unavailable', 'database down');

describe('Reporter', () => {
  it('gives the assignments an answer carries to onAssignments, once', async () => {
    const srv = fakeServer();
    const got: string[] = [];
    const { r } = reporter(srv.send, { onAssignments: (as) => got.push(...as.map((a) => a.attemptId)) });
    const done = r.complete(outcome('a1'));
    const call = await srv.nextCall(1);
    const b = {
      attemptId: 'b1',
      token: 3,
      jobId: 'j',
      stageName: 'b',
      attemptNumber: 1,
      command: ['true'],
      env: {},
      gpuIndices: [],
      timeoutSeconds: null,
      inputs: [],
    };
    call.answer({ ...okAll(call.req), assignments: [b] });
    expect((await done).result).toBe('ok');
    expect(got).toEqual(['b1']);
    // An answer without assignments calls nothing.
    const next = r.complete(outcome('a2'));
    (await srv.nextCall(2)).answer();
    await next;
    expect(got).toHaveLength(1);
  });

  it("starts the answer's assignments before it settles the outcomes it acknowledges, and answers acknowledgements at once", async () => {
    const srv = fakeServer();
    const order: string[] = [];
    // A start that takes many turns of the microtask queue but never waits on I/O (the agent's
    // directory, user, cgroup and launcher line: AttemptRunner.execute through launchAttempt).
    const start = async (id: string) => {
      for (let i = 0; i < 20; i++) await Promise.resolve();
      order.push(`spawned ${id}`);
    };
    // Both items in one request: the first waits for the second (coming), which joins it.
    let coming = 1;
    const { r } = reporter(srv.send, { coming: () => coming, gatherMs: 20, onAssignments: (as) => as.forEach((a) => void start(a.attemptId)) });
    const ended = r.complete(outcome('a1')).then(() => order.push('settled a1'));
    const acked = r.acknowledge('c1', 1).then(() => order.push('acknowledged c1'));
    coming = 0;
    const call = await srv.nextCall(1);
    const b = fakeAssignment('b', { attemptId: 'b1' });
    call.answer({ ...okAll(call.req), assignments: [b] });
    await Promise.all([ended, acked]);
    expect(call.req.completed.length + call.req.started.length).toBe(2);
    expect(order).toEqual(['acknowledged c1', 'spawned b1', 'settled a1']);
  });

  it('holds a pid back for the delay, even from a report that goes meanwhile, and drops it for the outcome', async () => {
    const srv = fakeServer();
    const { r } = reporter(srv.send, { pidDelayMs: 150 });
    const t0 = Date.now();
    const pid1 = r.recordPid('a1', 1, 111);
    await new Promise((res) => setTimeout(res, 50));
    expect(srv.calls).toHaveLength(0);
    // An acknowledgement goes at once, without it.
    const ack = r.acknowledge('a2', 1);
    (await srv.nextCall(1)).answer();
    expect(srv.calls[0]!.req.started).toEqual([{ attemptId: 'a2', token: 1, pid: null }]);
    await ack;
    // Once due, it goes (alone here: nothing else is queued).
    (await srv.nextCall(2)).answer();
    expect(Date.now() - t0).toBeGreaterThanOrEqual(140);
    expect(srv.calls[1]!.req.started).toEqual([{ attemptId: 'a1', token: 1, pid: 111 }]);
    expect((await pid1)?.result).toBe('ok');
    // An outcome before then takes its place: the pid is never sent.
    const pid4 = r.recordPid('a4', 1, 444);
    const done = r.complete(outcome('a4'));
    (await srv.nextCall(3)).answer();
    expect(srv.calls[2]!.req).toEqual({ started: [], completed: [outcome('a4')] });
    expect(await pid4).toBeNull();
    await done;
  });

  it('sends at once when idle, and everything queued meanwhile in the next request', async () => {
    const srv = fakeServer();
    const { r } = reporter(srv.send);
    const first = r.acknowledge('a1', 1);
    const call1 = await srv.nextCall(1);
    expect(call1.req).toEqual({ started: [{ attemptId: 'a1', token: 1, pid: null }], completed: [] });
    // While the first is in flight: two outcomes and an acknowledgement queue up.
    const later = [r.complete(outcome('a2')), r.complete(outcome('a3')), r.acknowledge('a4', 1)];
    await new Promise((res) => setTimeout(res, 20));
    expect(srv.calls).toHaveLength(1);
    call1.answer();
    expect(await first).toEqual({ attemptId: 'a1', result: 'ok' });
    const call2 = await srv.nextCall(2);
    expect(call2.req.completed.map((c) => c.attemptId)).toEqual(['a2', 'a3']);
    expect(call2.req.started.map((s) => s.attemptId)).toEqual(['a4']);
    call2.answer();
    expect((await Promise.all(later)).map((x) => x.result)).toEqual(['ok', 'ok', 'ok']);
    expect(srv.calls).toHaveLength(2);
  });

  it('waits for items the agent says are coming, so that a group goes in one request', async () => {
    const srv = fakeServer();
    let coming = 3;
    const { r } = reporter(srv.send, { coming: () => coming, gatherMs: 5_000 });
    // Three acknowledgements whose directories are being made: the first waits for the others.
    const acks = ['a1', 'a2', 'a3'].map((id) => {
      coming--;
      return r.acknowledge(id, 1);
    });
    const call1 = await srv.nextCall(1);
    expect(call1.req.started.map((s) => s.attemptId)).toEqual(['a1', 'a2', 'a3']);
    call1.answer();
    await Promise.all(acks);
    // Nothing coming: an item goes at once.
    const t0 = Date.now();
    const done = r.complete(outcome('b1'));
    (await srv.nextCall(2)).answer();
    await done;
    expect(Date.now() - t0).toBeLessThan(1_000);
    expect(srv.calls).toHaveLength(2);
  });

  it('waits for coming items at most gatherMs, counted from the last answer', async () => {
    const srv = fakeServer();
    // Something is always said to be coming (a run that never hands over its item).
    const { r } = reporter(srv.send, { coming: () => 1, gatherMs: 100 });
    const t0 = Date.now();
    const first = r.acknowledge('a1', 1);
    const call1 = await srv.nextCall(1);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(95);
    // Queued while the first is in flight, and held 300 ms: the wait starts when the answer comes,
    // not when it was queued (its siblings are made while the first request is answered).
    const second = r.complete(outcome('b1'));
    await new Promise((res) => setTimeout(res, 300));
    const t1 = Date.now();
    call1.answer();
    await first;
    const call2 = await srv.nextCall(2);
    expect(Date.now() - t1).toBeGreaterThanOrEqual(95);
    expect(call2.req.completed.map((c) => c.attemptId)).toEqual(['b1']);
    call2.answer();
    await second;
  });

  it('keeps items queued through failures and delivers each once, with what queued meanwhile', async () => {
    const srv = fakeServer();
    const { r } = reporter(srv.send);
    const a = r.complete(outcome('a1'));
    (await srv.nextCall(1)).answer(unavailable());
    const b = r.complete(outcome('a2'));
    const call2 = await srv.nextCall(2);
    // The failed item first, then the new one, in one request.
    expect(call2.req.completed.map((c) => c.attemptId)).toEqual(['a1', 'a2']);
    call2.answer(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }));
    const call3 = await srv.nextCall(3);
    expect(call3.req.completed.map((c) => c.attemptId)).toEqual(['a1', 'a2']);
    call3.answer();
    expect((await a).result).toBe('ok');
    expect((await b).result).toBe('ok');
    expect(srv.calls).toHaveLength(3);
  });

  it('sends the items of a request refused as a whole one by one, so only the faulty one fails', async () => {
    const srv = fakeServer();
    const { r } = reporter(srv.send);
    const first = r.acknowledge('a0', 1);
    const call1 = await srv.nextCall(1);
    const good = r.complete(outcome('good'));
    const bad = r.complete(outcome('bad'));
    // Watched from now: its refusal can come before good's answer is given (outcomes' answers wait a turn of the event loop).
    const badRefused = expect(bad).rejects.toThrow(/bad item/);
    call1.answer();
    await first;
    (await srv.nextCall(2)).answer(new AgentHttpError(400, 'validation', 'bad item'));
    const call3 = await srv.nextCall(3);
    expect(call3.req.completed.map((c) => c.attemptId)).toEqual(['good']);
    call3.answer();
    const call4 = await srv.nextCall(4);
    expect(call4.req.completed.map((c) => c.attemptId)).toEqual(['bad']);
    call4.answer(new AgentHttpError(400, 'validation', 'bad item'));
    expect((await good).result).toBe('ok');
    await badRefused;
  });

  it('withdraws a queued item when its signal aborts, without sending it', async () => {
    const srv = fakeServer();
    const { r } = reporter(srv.send);
    const first = r.acknowledge('a0', 1);
    const call1 = await srv.nextCall(1);
    const ctl = new AbortController();
    const withdrawn = r.acknowledge('a1', 1, ctl.signal);
    ctl.abort();
    await expect(withdrawn).rejects.toMatchObject({ name: 'AbortError' });
    call1.answer();
    await first;
    await new Promise((res) => setTimeout(res, 20));
    expect(srv.calls).toHaveLength(1);
    expect(r.pending).toBe(0);
  });

  it('drops a pid record still waiting when the outcome of the same attempt comes', async () => {
    const srv = fakeServer();
    const { r } = reporter(srv.send);
    const first = r.acknowledge('a0', 1);
    const call1 = await srv.nextCall(1);
    const pid = r.recordPid('a1', 1, 4242);
    const done = r.complete(outcome('a1'));
    expect(await pid).toBeNull();
    call1.answer();
    await first;
    const call2 = await srv.nextCall(2);
    expect(call2.req).toMatchObject({ started: [], completed: [{ attemptId: 'a1' }] });
    call2.answer();
    expect((await done).result).toBe('ok');
  });

  it('registers again on a 404 and resends', async () => {
    const srv = fakeServer();
    let registered = 0;
    const { r } = reporter(srv.send, { onUnknownMachine: async () => (registered++, true) });
    const a = r.complete(outcome('a1'));
    (await srv.nextCall(1)).answer(new UnknownMachine('m1'));
    (await srv.nextCall(2)).answer();
    expect((await a).result).toBe('ok');
    expect(registered).toBe(1);
  });

  it('gives an item up once it has failed for longer than giveUpMs', async () => {
    let now = 0;
    const srv = fakeServer();
    const { r } = reporter(srv.send, { now: () => now, giveUpMs: 1000 });
    const a = r.complete(outcome('a1'));
    (await srv.nextCall(1)).answer(unavailable());
    const call2 = await srv.nextCall(2);
    now = 1000;
    call2.answer(unavailable());
    const call3 = await srv.nextCall(3);
    now = 1500;
    call3.answer(unavailable());
    const err = await a.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Undeliverable);
    expect((err as Undeliverable).failingForMs).toBe(1500);
    expect(r.pending).toBe(0);
  });

  it('rejects everything when halted', async () => {
    const srv = fakeServer();
    const { r, halt } = reporter(srv.send);
    const a = r.complete(outcome('a1'));
    await srv.nextCall(1);
    const b = r.complete(outcome('a2'));
    halt.abort();
    srv.calls[0]!.answer(new DOMException('aborted', 'AbortError'));
    await expect(a).rejects.toMatchObject({ name: 'AbortError' });
    await expect(b).rejects.toMatchObject({ name: 'AbortError' });
    await expect(r.acknowledge('a3', 1)).rejects.toMatchObject({ name: 'AbortError' });
  });

  it('refuses an answer that does not match the request', async () => {
    const srv = fakeServer();
    const { r } = reporter(srv.send);
    const a = r.complete(outcome('a1'));
    (await srv.nextCall(1)).answer({ started: [], completed: [] });
    await expect(a).rejects.toThrow(/does not match/);
  });
  describe('with two requests in flight', () => {
    it("sends a second request while the first is unanswered, each attempt's items in their order", async () => {
      const srv = fakeServer();
      const { r } = reporter(srv.send, { maxInFlight: 2 });
      const ack1 = r.acknowledge('a1', 1);
      const call1 = await srv.nextCall(1);
      // a1's outcome must not overtake its acknowledgement, in flight; a2's goes at once.
      const done1 = r.complete(outcome('a1'));
      const ack2 = r.acknowledge('a2', 1);
      const call2 = await srv.nextCall(2);
      expect(call2.req).toEqual({ started: [{ attemptId: 'a2', token: 1, pid: null }], completed: [] });
      await new Promise((res) => setTimeout(res, 20));
      expect(srv.calls).toHaveLength(2);
      call2.answer();
      expect((await ack2).result).toBe('ok');
      // Still held: its acknowledgement has no answer yet.
      await new Promise((res) => setTimeout(res, 20));
      expect(srv.calls).toHaveLength(2);
      call1.answer();
      expect((await ack1).result).toBe('ok');
      const call3 = await srv.nextCall(3);
      expect(call3.req).toEqual({ started: [], completed: [outcome('a1')] });
      call3.answer();
      expect((await done1).result).toBe('ok');
    });

    it('never more than two at once, and one at a time while requests fail', async () => {
      const srv = fakeServer();
      const { r } = reporter(srv.send, { maxInFlight: 2 });
      const items = [r.acknowledge('a1', 1)];
      const call1 = await srv.nextCall(1);
      items.push(r.acknowledge('a2', 1));
      const call2 = await srv.nextCall(2);
      items.push(r.acknowledge('a3', 1), r.acknowledge('a4', 1));
      await new Promise((res) => setTimeout(res, 20));
      expect(srv.calls).toHaveLength(2);
      // The first fails: while failing, one request at a time, so nothing goes beside the second.
      call1.answer(unavailable());
      await new Promise((res) => setTimeout(res, 30));
      expect(srv.calls).toHaveLength(2);
      call2.answer();
      // Then the failed item first, with what queued meanwhile, in one request.
      const call3 = await srv.nextCall(3);
      expect(call3.req.started.map((s) => s.attemptId)).toEqual(['a1', 'a3', 'a4']);
      call3.answer(unavailable());
      const call4 = await srv.nextCall(4);
      expect(call4.req.started.map((s) => s.attemptId)).toEqual(['a1', 'a3', 'a4']);
      // Answered: two at once again.
      call4.answer();
      items.push(r.acknowledge('a5', 1));
      const call5 = await srv.nextCall(5);
      items.push(r.acknowledge('a6', 1));
      const call6 = await srv.nextCall(6);
      call5.answer();
      call6.answer();
      expect((await Promise.all(items)).map((x) => x.result)).toEqual(['ok', 'ok', 'ok', 'ok', 'ok', 'ok']);
    });
  });
});
