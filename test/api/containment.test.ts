import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HeartbeatResponse, RegisterResponse } from '../../src/api/contract/agent-protocol.js';
import type { JobView, MachineView } from '../../src/api/contract/job-view.js';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { hybridReport } from '../support/containment-report.js';
import { bearer, makeToken } from '../support/tokens.js';

const report = hybridReport;

/**
 * Containment through the API (docs/containment.md): what an agent reports at registration, shown
 * by GET /v1/machines; the limits an assignment carries; the usage an outcome carries, on the
 * attempt's view and its event. A control plane not started (no loop runs): the test places.
 */
describe('containment: machines, assignments, usage', () => {
  let cp: ControlPlane;
  let dir: string;
  let admin: string;
  let join_: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-containment-'));
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0 }), { logger: false });
    admin = await makeToken(cp.store, 'admin');
    join_ = await makeToken(cp.store, 'join');
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const call = async (method: 'GET' | 'POST', url: string, token: string, body?: unknown) =>
    cp.app.inject({
      method,
      url,
      headers: { ...bearer(token), 'content-type': 'application/json' },
      ...(body === undefined ? {} : { payload: JSON.stringify(body) }),
    });
  const registration = (name: string, containment?: unknown) => ({
    name,
    cpuMillis: 8000,
    memoryBytes: 16 * 2 ** 30,
    gpus: [],
    gpusDeclared: false,
    region: null,
    labels: {},
    agent: { version: 'test', host: 'h', pid: 1, ...(containment === undefined ? {} : { containment }) },
  });
  const register = async (name: string, containment?: unknown) => {
    const r = await call('POST', '/v1/agent/register', join_, registration(name, containment));
    expect(r.statusCode, r.body).toBe(200);
    const body = r.json<RegisterResponse>();
    return { id: body.machineId, credential: body.credential! };
  };
  const machines = async () => (await call('GET', '/v1/machines', admin)).json<{ machines: MachineView[] }>().machines;
  /** Submits a one-stage job and places it on the machine; returns its job id. */
  const placed = async (machineId: string, stage: Record<string, unknown>) => {
    const r = await call('POST', '/v1/jobs', admin, { name: 'c', stages: [{ name: 'a', command: ['true'], ...stage }] });
    expect(r.statusCode, r.body).toBe(201);
    const jobId = r.json<JobView>().id;
    const s = (await cp.store.jobGet({ jobId }))!.stages[0]!;
    await cp.store.planApply({
      plan: {
        placements: [
          { stageId: s.id, machineId, gpuIndices: [], cpuMillis: s.definition.resources.cpuMillis, memoryBytes: s.definition.resources.memoryBytes },
        ],
        pending: [],
      },
      now: Date.now(),
      leaseMs: 60_000,
    });
    return jobId;
  };
  const assignments = async (m: { id: string; credential: string }) =>
    (await call('POST', `/v1/agent/machines/${m.id}/heartbeat`, m.credential, { running: [], waitMs: 0 })).json<HeartbeatResponse>().assignments;

  it('a registration with containment: GET /v1/machines and GET /v1/machines/NAME show the whole report; without: null', async () => {
    await register('contained-1', { ...report, later: 'a field a later agent adds' });
    await register('older-1');
    const byName = new Map((await machines()).map((m) => [m.name, m]));
    expect(byName.get('contained-1')!.containment).toEqual({ ...report, later: 'a field a later agent adds' });
    expect(byName.get('older-1')!.containment).toBeNull();
    expect((await call('GET', '/v1/machines/contained-1', admin)).json<MachineView>().containment).toEqual({ ...report, later: 'a field a later agent adds' });
    // Kept as a column of its own, not twice: the agent's description is what remains.
    expect((await cp.store.machineFind({ machine: 'contained-1' }))!.agent).toEqual({ version: 'test', host: 'h', pid: 1 });
  });

  it('a report that is not one is refused, naming the field', async () => {
    const r = await call('POST', '/v1/agent/register', join_, registration('bad-1', { ...report, mechanism: 'magic' }));
    expect(r.statusCode).toBe(400);
    expect(r.body).toMatch(/containment\/mechanism/);
    expect((await machines()).map((m) => m.name)).not.toContain('bad-1');
  });

  it("an assignment carries the stage's request, limits (its outputs' too: its own, else the server's default) and network", async () => {
    const m = await register('limits-1', report);
    await placed(m.id, {
      resources: { cpu: 2, memory: '1Gi' },
      limits: { memory: '1536Mi', cpu: 3, pids: 128, outputs: { bytes: '2Gi', files: 7 } },
      network: true,
    });
    await placed(m.id, { resources: { cpu: '500m', memory: '64Mi' } });
    const got = await assignments(m);
    expect(got.map((a) => a.limits)).toEqual([
      {
        requestCpuMillis: 2000,
        requestMemoryBytes: 2 ** 30,
        memoryBytes: 1536 * 2 ** 20,
        cpuMillis: 3000,
        pids: 128,
        network: true,
        outputs: { bytes: 2 * 2 ** 30, files: 7 },
      },
      {
        requestCpuMillis: 500,
        requestMemoryBytes: 64 * 2 ** 20,
        memoryBytes: null,
        cpuMillis: null,
        pids: null,
        network: false,
        outputs: { bytes: 10 * 2 ** 30, files: 10_000 },
      },
    ]);
  });

  it("an outcome's usage, by the complete route and by a report: on the attempt's view and in its event", async () => {
    const m = await register('usage-1', report);
    const oomJob = await placed(m.id, { resources: { memory: '64Mi' }, retry: { maxAttempts: 1 } });
    const okJob = await placed(m.id, {});
    const [oom, ok] = await assignments(m);
    for (const a of [oom!, ok!]) {
      const r = await call('POST', `/v1/agent/attempts/${a.attemptId}/start`, m.credential, { token: a.token, pid: 10 });
      expect(r.statusCode, r.body).toBe(200);
    }
    const detail = 'killed by its memory limit (64 MiB) at a peak of 64 MiB: raise resources.memory (or limits.memory)';
    const complete = await call('POST', `/v1/agent/attempts/${oom!.attemptId}/complete`, m.credential, {
      token: oom!.token,
      exitCode: null,
      signal: 'SIGKILL',
      reason: null,
      end: { kind: 'oom-killed', detail },
      outputs: [],
      usage: { memoryPeakBytes: 64 * 2 ** 20, cpuSeconds: 0.25 },
    });
    expect(complete.statusCode, complete.body).toBe(200);
    const rep = await call('POST', `/v1/agent/machines/${m.id}/report`, m.credential, {
      started: [],
      completed: [
        {
          attemptId: ok!.attemptId,
          token: ok!.token,
          exitCode: 0,
          signal: null,
          reason: null,
          end: { kind: 'exited', detail: null },
          outputs: [],
          usage: { memoryPeakBytes: 3_000_000, cpuSeconds: 1.5 },
        },
      ],
    });
    expect(rep.statusCode, rep.body).toBe(200);

    const attemptOf = async (jobId: string) => (await call('GET', `/v1/jobs/${jobId}`, admin)).json<JobView>().stages[0]!.attempts[0]!;
    expect(await attemptOf(oomJob)).toMatchObject({ state: 'failed', endKind: 'oom-killed', reason: detail, memoryPeakBytes: 64 * 2 ** 20, cpuSeconds: 0.25 });
    expect(await attemptOf(okJob)).toMatchObject({ state: 'succeeded', memoryPeakBytes: 3_000_000, cpuSeconds: 1.5 });
    const dataOf = async (jobId: string, type: string) => (await cp.store.eventsList({ jobId, limit: 100 })).find((e) => e.type === type)!.data;
    expect(await dataOf(oomJob, 'attempt:failed')).toMatchObject({ end: 'oom-killed', usage: { memoryPeakBytes: 64 * 2 ** 20, cpuSeconds: 0.25 } });
    expect(await dataOf(okJob, 'attempt:succeeded')).toMatchObject({ end: 'exited', usage: { memoryPeakBytes: 3_000_000, cpuSeconds: 1.5 } });
  });

  it('an outcome without usage (an agent before protocol 3) leaves it unknown', async () => {
    const m = await register('older-2');
    const jobId = await placed(m.id, {});
    const [a] = await assignments(m);
    await call('POST', `/v1/agent/attempts/${a!.attemptId}/start`, m.credential, { token: a!.token, pid: 10 });
    const r = await call('POST', `/v1/agent/attempts/${a!.attemptId}/complete`, m.credential, {
      token: a!.token,
      exitCode: 0,
      signal: null,
      reason: null,
      outputs: [],
    });
    expect(r.statusCode, r.body).toBe(200);
    const attempt = (await call('GET', `/v1/jobs/${jobId}`, admin)).json<JobView>().stages[0]!.attempts[0]!;
    expect(attempt).toMatchObject({ state: 'succeeded', memoryPeakBytes: null, cpuSeconds: null });
  });
});
