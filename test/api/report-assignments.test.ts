import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AssignmentWire, HeartbeatResponse, RegisterResponse, ReportResponse } from '../../src/api/contract/agent-protocol.js';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { bearer, makeToken } from '../support/tokens.js';

/**
 * Assignments on the answers to reports (docs/agent.md): a started control plane (it places in
 * the transactions that free room), one machine played through the real agent routes.
 */
describe('assignments on the answers to reports', () => {
  let cp: ControlPlane;
  let dir: string;
  let admin: string;
  let machine: { id: string; credential: string; settings: RegisterResponse['settings'] };
  const call = async <T>(url: string, body: unknown, token: string): Promise<T> => {
    const r = await cp.app.inject({ method: 'POST', url, headers: { ...bearer(token), 'content-type': 'application/json' }, payload: JSON.stringify(body) });
    if (r.statusCode >= 300) throw new Error(`${url}: ${r.statusCode} ${r.body}`);
    return r.json<T>();
  };
  const heartbeat = (running: AssignmentWire[], waitMs: number) =>
    call<HeartbeatResponse>(
      `/v1/agent/machines/${machine.id}/heartbeat`,
      { running: running.map((a) => ({ attemptId: a.attemptId, token: a.token })), waitMs },
      machine.credential,
    );
  const report = (body: object) => call<ReportResponse>(`/v1/agent/machines/${machine.id}/report`, { started: [], completed: [], ...body }, machine.credential);
  const ack = (a: AssignmentWire) => report({ started: [{ attemptId: a.attemptId, token: a.token, pid: null }] });
  const success = (a: AssignmentWire) => ({ attemptId: a.attemptId, token: a.token, exitCode: 0, signal: null, reason: null, outputs: [] });
  /** A job of two stages, a → b, with a placed, acknowledged and running on the machine. */
  const running = async (): Promise<AssignmentWire> => {
    const stage = (name: string, needs: string[]) => ({ name, needs, command: ['true'], resources: { cpu: '1', memory: '64Mi' } });
    await call('/v1/jobs', { name: 'pair', stages: [stage('a', []), stage('b', ['a'])] }, admin);
    let a: AssignmentWire | undefined;
    for (let i = 0; i < 50 && !a; i++) a = (await heartbeat([], 200)).assignments[0];
    expect(a?.stageName).toBe('a');
    expect((await ack(a!)).started[0]!.result).toBe('ok');
    return a!;
  };

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-report-assignments-'));
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0, host: '127.0.0.1', heartbeatMs: 600 }), { logger: false });
    await cp.start();
    admin = await makeToken(cp.store, 'admin');
    const joinToken = await makeToken(cp.store, 'join');
    const reg = await call<RegisterResponse>(
      '/v1/agent/register',
      {
        name: 'm1',
        cpuMillis: 4000,
        memoryBytes: 8 * 2 ** 30,
        gpus: [],
        gpusDeclared: false,
        region: null,
        labels: {},
        agent: { version: 'test', host: 'test', pid: 1 },
      },
      joinToken,
    );
    machine = { id: reg.machineId, credential: reg.credential!, settings: reg.settings };
  });
  let stopped = false;
  afterEach(async () => {
    if (!stopped) await cp.stop();
    stopped = false;
    rmSync(dir, { recursive: true, force: true });
  });

  it('the server offers it in its settings, and a report that asks gets the work its outcomes made room for', async () => {
    expect(machine.settings.reportAssignments).toBe(true);
    const a = await running();
    const r = await report({ completed: [success(a)], assignments: true });
    expect(r.completed[0]!.result).toBe('ok');
    expect(r.assignments?.map((x) => x.stageName)).toEqual(['b']);
    // Everything a heartbeat's assignment carries: b's command, its input from a.
    expect(r.assignments![0]!.inputs).toEqual([{ stage: 'a', attemptId: a.attemptId, files: [] }]);
    // An agent that did not say it runs started assignments (an older one) acknowledges b as before.
    expect(r.assignments![0]!.started).toBeUndefined();
    expect((await ack(r.assignments![0]!)).started[0]!.result).toBe('ok');
  });

  /** b's attempts on the store: state and whether a pid or start time is there. */
  const attemptsOfB = async (a: AssignmentWire) => {
    const job = (await cp.store.jobGet({ jobId: a.jobId }))!;
    return job.stages.find((s) => s.name === 'b')!.attempts;
  };

  it('an agent that runs started assignments gets its work written running at once: no acknowledgement, one event', async () => {
    expect(machine.settings.startedAssignments).toBe(true);
    const a = await running();
    const r = await report({ completed: [success(a)], assignments: true, startAssignments: true });
    const b = r.assignments![0]!;
    expect([b.stageName, b.started]).toEqual(['b', true]);
    expect((await attemptsOfB(a)).map((x) => x.state)).toEqual(['running']);
    const job = (await cp.store.jobGet({ jobId: a.jobId }))!;
    expect([job.state, job.stages.find((s) => s.name === 'b')!.state]).toEqual(['running', 'running']);
    const events = (await cp.store.eventsList({ jobId: a.jobId, limit: 100 })).filter((e) => e.attemptId === b.attemptId).map((e) => e.type);
    expect(events).toEqual(['attempt:running']);
    // A heartbeat listing it renews it, and its outcome ends the job.
    expect((await heartbeat([b], 0)).kill).toEqual([]);
    expect((await report({ completed: [success(b)] })).completed[0]!.result).toBe('ok');
    expect((await cp.store.jobGet({ jobId: a.jobId }))!.state).toBe('succeeded');
  });

  it('a lost answer: no heartbeat within a period of it is evidence; the next one that does not list it reaps it, and the stage runs once more', async () => {
    const a = await running();
    const r = await report({ completed: [success(a)], assignments: true, startAssignments: true });
    const lostOne = r.assignments![0]!;
    // The answer never reached the agent: its heartbeats list nothing. Within the grace, nothing is lost.
    await heartbeat([], 0);
    expect((await attemptsOfB(a)).map((x) => x.state)).toEqual(['running']);
    // Resent (its answer was lost): the outcome is a duplicate, and nothing is started twice.
    const again = await report({ completed: [success(a)], assignments: true, startAssignments: true });
    expect(again.completed[0]!.result).toBe('duplicate');
    expect(again.assignments ?? []).toEqual([]);
    // Past two periods since its start and one since the answer: the next heartbeat reaps it.
    await new Promise((r) => setTimeout(r, 1300));
    let b: AssignmentWire | undefined;
    for (let i = 0; i < 50 && !b; i++) b = (await heartbeat([], 200)).assignments.find((x) => x.stageName === 'b');
    expect(b!.attemptId).not.toBe(lostOne.attemptId);
    expect(b!.started).toBeUndefined();
    expect((await ack(b!)).started[0]!.result).toBe('ok');
    expect((await report({ completed: [success(b!)] })).completed[0]!.result).toBe('ok');
    const attempts = await attemptsOfB(a);
    expect(attempts.map((x) => [x.id, x.state])).toEqual([
      [lostOne.attemptId, 'lost'],
      [b!.attemptId, 'succeeded'],
    ]);
    expect((await cp.store.jobGet({ jobId: a.jobId }))!.state).toBe('succeeded');
  });

  it('canceled while its answer travels: the heartbeat that first lists it is told to kill it', async () => {
    const a = await running();
    const r = await report({ completed: [success(a)], assignments: true, startAssignments: true });
    const b = r.assignments![0]!;
    await call(`/v1/jobs/${a.jobId}/cancel`, {}, admin);
    expect((await attemptsOfB(a)).map((x) => x.state)).toEqual(['canceled']);
    // The agent has spawned it (it may: it was running when its answer left); it lists it, and is told.
    const answer = await heartbeat([b], 0);
    expect(answer.kill.map((k) => k.attemptId)).toEqual([b.attemptId]);
    // Its outcome, were it to come, is refused: nothing of it counts.
    expect((await report({ completed: [success(b)] })).completed[0]!.result).toBe('stale');
  });

  it('a heartbeat held meanwhile is not answered for what the report carried; a later one that does not list it gets it again', async () => {
    const a = await running();
    const held = heartbeat([a], 600);
    // The heartbeat is held before the report arrives.
    await new Promise((r) => setTimeout(r, 100));
    const t0 = Date.now();
    const r = await report({ completed: [success(a)], assignments: true });
    const b = r.assignments![0]!;
    const answered = await held;
    expect(answered.assignments).toEqual([]);
    // Held to its end (600 ms from its arrival), not woken into an answer by b's placement.
    expect(Date.now() - t0).toBeGreaterThan(300);
    // An agent that lost that answer lists nothing: its next heartbeat brings b.
    expect((await heartbeat([], 0)).assignments.map((x) => x.attemptId)).toEqual([b.attemptId]);
  });

  it('a report that does not ask (an older agent) gets no assignments, and a held heartbeat brings them at once', async () => {
    const a = await running();
    const held = heartbeat([a], 5000);
    await new Promise((r) => setTimeout(r, 100));
    const t0 = Date.now();
    const r = await report({ completed: [success(a)] });
    expect(r.assignments).toBeUndefined();
    const answered = await held;
    expect(answered.assignments.map((x) => x.stageName)).toEqual(['b']);
    expect(Date.now() - t0).toBeLessThan(2000);
  });

  it('a heartbeat that still lists an attempt whose outcome the machine reported is not told to kill it; one canceled meanwhile is', async () => {
    const a = await running();
    // Its outcome, before the heartbeat that listed it arrives (the agent lists it until the answer).
    await report({ completed: [success(a)] });
    const stage = { name: 'x', command: ['true'], resources: { cpu: '1', memory: '64Mi' } };
    const other = (await call<{ id: string }>('/v1/jobs', { name: 'other', stages: [stage] }, admin)).id;
    let x: AssignmentWire | undefined;
    for (let i = 0; i < 50 && !x; i++) x = (await heartbeat([a], 200)).assignments.find((y) => y.stageName === 'x');
    expect((await ack(x!)).started[0]!.result).toBe('ok');
    await call(`/v1/jobs/${other}/cancel`, {}, admin);
    const answer = await heartbeat([a, x!], 0);
    expect(answer.kill.map((k) => k.attemptId)).toEqual([x!.attemptId]);
  });

  it('a server stopped while a heartbeat is held answers it and stops at once, not after the keep-alive', async () => {
    // Over a real socket with keep-alive (fetch's default), as agents connect.
    const held = fetch(`${cp.url}/v1/agent/machines/${machine.id}/heartbeat`, {
      method: 'POST',
      headers: { ...bearer(machine.credential), 'content-type': 'application/json' },
      body: JSON.stringify({ running: [], waitMs: 600 }),
    });
    await new Promise((r) => setTimeout(r, 100));
    const t0 = Date.now();
    await cp.stop();
    stopped = true;
    expect(Date.now() - t0).toBeLessThan(5000);
    const res = await held;
    expect(res.status).toBe(200);
    expect(res.headers.get('connection')).toBe('close');
  });

  it('a report of acknowledgements only does not read assignments', async () => {
    await call('/v1/jobs', { name: 'one', stages: [{ name: 'x', command: ['true'], resources: { cpu: '1', memory: '64Mi' } }] }, admin);
    await call('/v1/jobs', { name: 'two', stages: [{ name: 'y', command: ['true'], resources: { cpu: '1', memory: '64Mi' } }] }, admin);
    let got: AssignmentWire[] = [];
    for (let i = 0; i < 50 && got.length < 2; i++) got = (await heartbeat([], 200)).assignments;
    expect(got).toHaveLength(2);
    const r = await report({ started: [{ attemptId: got[0]!.attemptId, token: got[0]!.token, pid: null }], assignments: true });
    expect(r.started[0]!.result).toBe('ok');
    expect(r.assignments).toBeUndefined();
  });
});
