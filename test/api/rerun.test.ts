import { mkdtempSync, rmSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { cpuMachine } from '../../src/store/conformance/fixtures.js';
import type { MachineRecord } from '../../src/store/records.js';
import { bearer, makeToken, registerMachine } from '../support/tokens.js';

/** `POST /v1/jobs/{id}/rerun` and `POST /v1/artifacts/gc` through the API (docs/rerun.md). */
describe('rerun and collection routes', () => {
  let cp: ControlPlane;
  let dir: string;
  let machine: MachineRecord & { credential: string };
  const t = { admin: '', ml: '', other: '' };
  const call = (method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, token: string | null, body?: unknown, extra: Record<string, string> = {}) =>
    cp.app.inject({
      method,
      url,
      headers: { ...(token ? bearer(token) : {}), ...(body !== undefined && typeof body !== 'string' ? { 'content-type': 'application/json' } : {}), ...extra },
      ...(body !== undefined ? { payload: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
    });
  const spec = (evalCommand = ['false']) => ({
    name: 'pipe',
    stages: [
      { name: 'prep', command: ['true'] },
      { name: 'train', needs: ['prep'], command: ['true'] },
      { name: 'eval', needs: ['train'], command: evalCommand, retry: { maxAttempts: 1 } },
    ],
  });
  /** One stage through the agent protocol: placed, acknowledged, its files uploaded, its outcome reported. */
  const run = async (jobId: string, stage: string, exitCode: number, files: Record<string, string> = {}) => {
    const s = (await cp.store.jobGet({ jobId }))!.stages.find((x) => x.name === stage)!;
    const a = (
      await cp.store.planApply({
        plan: { placements: [{ stageId: s.id, machineId: machine.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 }], pending: [] },
        now: Date.now(),
        leaseMs: 60_000,
      })
    ).applied[0]!;
    const m = bearer(machine.credential);
    await cp.app.inject({
      method: 'POST',
      url: `/v1/agent/attempts/${a.id}/start`,
      headers: { ...m, 'content-type': 'application/json' },
      payload: JSON.stringify({ token: a.token, pid: null }),
    });
    for (const [path, text] of Object.entries(files)) {
      const up = await cp.app.inject({
        method: 'PUT',
        url: `/v1/agent/attempts/${a.id}/outputs/${path}`,
        headers: { ...m, 'x-gantry-token': String(a.token), 'content-type': 'application/octet-stream' },
        payload: text,
      });
      expect(up.statusCode).toBe(204);
    }
    const outputs = exitCode === 0 ? Object.entries(files).map(([path, text]) => ({ path, size: Buffer.byteLength(text) })) : [];
    const r = await cp.app.inject({
      method: 'POST',
      url: `/v1/agent/machines/${machine.id}/report`,
      headers: { ...m, 'content-type': 'application/json' },
      payload: JSON.stringify({ started: [], completed: [{ attemptId: a.id, token: a.token, exitCode, signal: null, reason: null, outputs }] }),
    });
    expect(r.json().completed[0].result).toBe('ok');
    return a;
  };
  /** The job: prep and train succeed with outputs, eval fails. */
  const failedJob = async (token = t.admin) => {
    const id = (await call('POST', '/v1/jobs', token, spec())).json().id as string;
    await run(id, 'prep', 0, { 'data.txt': 'data' });
    const train = await run(id, 'train', 0, { 'model.bin': `weights of ${id}` });
    await run(id, 'eval', 1);
    return { id, train };
  };
  const jobCount = async () => (await cp.store.jobList({ limit: 1000 })).length;
  const audit = async () =>
    ((await call('GET', '/v1/audit', t.admin)).json().entries as { action: string; target: string; result: string }[]).filter((e) => e.action === 'job.rerun');

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-rerun-api-'));
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0, artifactsGraceMs: 0 }));
    t.admin = await makeToken(cp.store, 'admin');
    t.ml = await makeToken(cp.store, 'team', { team: 'ml' });
    t.other = await makeToken(cp.store, 'team', { team: 'other' });
    machine = await registerMachine(cp.store, cpuMachine('c1'));
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers the plan and the new job; a repeat with its Idempotency-Key the same job (200); audited', async () => {
    const { id, train } = await failedJob();
    const dry = await call('POST', `/v1/jobs/${id}/rerun`, t.admin, { dryRun: true });
    expect(dry.statusCode).toBe(200);
    expect(dry.json()).toMatchObject({ dryRun: true, job: null, plan: { jobId: id, from: ['eval'], rerun: [{ stage: 'eval', because: null }] } });
    const body = { spec: spec(['true']) };
    const made = await call('POST', `/v1/jobs/${id}/rerun`, t.admin, body, { 'idempotency-key': 'r-1' });
    expect(made.statusCode).toBe(201);
    const r = made.json();
    expect(r.plan.reused.map((x: { stage: string; fromJob: string; files: number }) => [x.stage, x.fromJob, x.files])).toEqual([
      ['prep', id, 1],
      ['train', id, 1],
    ]);
    expect(r.job.rerunOf).toBe(id);
    const trainView = r.job.stages[1];
    expect(trainView.reused).toMatchObject({ jobId: id, attemptId: train.id, gpus: 0 });
    expect(trainView.outputs).toEqual([{ path: 'model.bin', size: Buffer.byteLength(`weights of ${id}`), sha256: expect.stringMatching(/^[0-9a-f]{64}$/) }]);
    expect(r.job.stages[2]).toMatchObject({ name: 'eval', state: 'ready', reused: null });
    expect((await call('GET', `/v1/jobs/${id}`, t.admin)).json().reruns).toEqual([r.job.id]);
    expect((await call('GET', '/v1/jobs?limit=1', t.admin)).json().jobs[0]).toMatchObject({ id: r.job.id, rerunOf: id });
    const doc = (await call('GET', '/openapi.json', t.admin)).json();
    expect(Object.keys(doc.paths['/v1/jobs/{id}/rerun'].post.responses)).toEqual(expect.arrayContaining(['200', '201', '400', '404', '409']));
    expect(doc.paths['/v1/artifacts/gc'].post).toBeDefined();
    const again = await call('POST', `/v1/jobs/${id}/rerun`, t.admin, body, { 'idempotency-key': 'r-1' });
    expect(again.statusCode).toBe(200);
    expect(again.json().job.id).toBe(r.job.id);
    expect(again.json().plan).toEqual({ ...r.plan, canceled: false });
    // The same key and body for another job is another request.
    const other = await failedJob();
    expect((await call('POST', `/v1/jobs/${other.id}/rerun`, t.admin, body, { 'idempotency-key': 'r-1' })).statusCode).toBe(409);
    await vi.waitFor(async () =>
      expect((await audit()).at(-1)).toMatchObject({ target: other.id, result: expect.stringMatching(/^refused: 409 conflict: Idempotency-Key "r-1"/) }),
    );
    expect((await audit()).find((e) => e.result.startsWith('ok'))).toMatchObject({
      target: id,
      result: expect.stringMatching(new RegExp(`^ok: rerun as ${r.job.id}; reused prep, train; runs eval$`)),
    });
    // The reused upstream reads as if it had run: an agent downloads it by the attempt that made it,
    // once the stage that needs it is placed on its machine (a machine reads only its stages' inputs).
    const evalStage = (await cp.store.jobGet({ jobId: r.job.id }))!.stages.find((x) => x.name === 'eval')!;
    await cp.store.planApply({
      plan: { placements: [{ stageId: evalStage.id, machineId: machine.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 }], pending: [] },
      now: Date.now(),
      leaseMs: 60_000,
    });
    const read = await cp.app.inject({ method: 'GET', url: `/v1/agent/artifacts/${train.id}/model.bin`, headers: bearer(machine.credential) });
    expect(read.body).toBe(`weights of ${id}`);
    expect((await call('GET', `/v1/jobs/${r.job.id}/stages/train/outputs/model.bin`, t.admin)).body).toBe(`weights of ${id}`);
  });

  it('refuses bad requests with 400 or 409, naming the problem, and writes nothing but the audit row', async () => {
    const { id } = await failedJob();
    const before = await jobCount();
    const refusals = [
      [{ frm: ['eval'] }, 400, /frm/],
      [{ from: 'eval' }, 400, /\/from/],
      [{ from: ['evall'] }, 400, /has no stage "evall" \(did you mean "eval"\?\)/],
      [{ spec: { name: 'pipe', stages: [{ name: 'prep' }] } }, 400, /\/spec\/stages\/0/],
      [
        { spec: { ...spec(), stages: spec().stages.map((s) => (s.name === 'prep' ? { ...s, env: { X: '1' } } : s)) } },
        400,
        /\/spec\/stages\/0\/env: stage prep is reused/,
      ],
      ['name: yaml', 400, /must be a JSON object/],
    ] as const;
    const auditBefore = (await audit()).length;
    for (const [body, status, message] of refusals) {
      const r =
        typeof body === 'string'
          ? await call('POST', `/v1/jobs/${id}/rerun`, t.admin, body, { 'content-type': 'application/yaml' })
          : await call('POST', `/v1/jobs/${id}/rerun`, t.admin, body);
      expect(r.statusCode, JSON.stringify(body)).toBe(status);
      expect(r.json().message).toMatch(message);
    }
    const busy = (await call('POST', '/v1/jobs', t.admin, { name: 'busy', stages: [{ name: 'a', command: ['sleep', '9'] }] })).json().id as string;
    const running = await call('POST', `/v1/jobs/${busy}/rerun`, t.admin, {});
    expect(running.statusCode).toBe(409);
    expect(running.json().message).toMatch(/is queued: .*--cancel-running/);
    expect(await jobCount()).toBe(before + 1);
    // A refusal's audit row is written once its answer has gone (onResponse): waited for.
    await vi.waitFor(async () =>
      expect((await audit()).slice(auditBefore).map((e) => e.result.slice(0, 12))).toEqual([...Array(6).fill('refused: 400'), 'refused: 409']),
    );
    // With cancelRunning: canceled and rerun in one step.
    const both = await call('POST', `/v1/jobs/${busy}/rerun`, t.admin, { cancelRunning: true });
    expect(both.statusCode).toBe(201);
    expect(both.json().plan.canceled).toBe(true);
    expect((await call('GET', `/v1/jobs/${busy}`, t.admin)).json().state).toBe('canceled');
  });

  it("a team token reruns its own team's jobs only (another's is not found); a spec that names no team is the job's team's", async () => {
    const { id } = await failedJob(t.ml);
    expect((await call('POST', `/v1/jobs/${id}/rerun`, t.other, {})).statusCode).toBe(404);
    const own = await call('POST', `/v1/jobs/${id}/rerun`, t.ml, { spec: spec(['true']) });
    expect(own.statusCode).toBe(201);
    expect(own.json().job.team).toBe('ml');
    expect((await call('POST', `/v1/jobs/${id}/rerun`, t.ml, { spec: { ...spec(['true']), team: 'other' } })).json().message).toMatch(
      /\/spec\/team: the team cannot change/,
    );
    expect((await call('POST', '/v1/jobs/job_nope/rerun', t.admin, {})).statusCode).toBe(404);
  });

  it('refuses to reuse a stage whose files are missing from the artifact store, naming the stage and file', async () => {
    const { id } = await failedJob();
    const view = (await call('GET', `/v1/jobs/${id}`, t.admin)).json();
    const sha = view.stages[1].outputs[0].sha256 as string;
    unlinkSync(join(dir, 'artifacts', 'blobs', 'sha256', sha.slice(0, 2), sha));
    const before = await jobCount();
    const r = await call('POST', `/v1/jobs/${id}/rerun`, t.admin, {});
    expect(r.statusCode).toBe(409);
    expect(r.json().message).toMatch(
      new RegExp(`stage train's committed outputs in job ${id} are gone from the artifact store: model.bin \\(sha256:${sha}\\) missing.*--from train`),
    );
    expect(await jobCount()).toBe(before);
    // Running it again instead is fine.
    expect((await call('POST', `/v1/jobs/${id}/rerun`, t.admin, { from: ['train'], dryRun: true })).statusCode).toBe(200);
  });

  it("collection is an admin's: dry run shows, the real one deletes what no job refers to; deleting a job keeps what a rerun reuses", async () => {
    expect((await call('POST', '/v1/artifacts/gc', t.ml, { dryRun: true })).statusCode).toBe(403);
    const { id } = await failedJob();
    const rerun = (await call('POST', `/v1/jobs/${id}/rerun`, t.admin, { from: ['train'] })).json().job.id as string;
    expect((await call('DELETE', `/v1/jobs/${id}`, t.admin)).statusCode).toBe(200);
    const dry = (await call('POST', '/v1/artifacts/gc', t.admin, { dryRun: true })).json();
    // train's model (the original's) is named by no job now; prep's data is reused by the rerun.
    const shas = dry.collect.map((c: { blob: string }) => c.blob);
    expect(dry.dryRun).toBe(true);
    const real = (await call('POST', '/v1/artifacts/gc', t.admin, {})).json();
    expect(real.collect.map((c: { blob: string }) => c.blob)).toEqual(shas);
    expect(real.deleted).toBe(shas.length);
    expect((await call('GET', `/v1/jobs/${rerun}/stages/prep/outputs/data.txt`, t.admin)).body).toBe('data');
    expect((await call('POST', '/v1/artifacts/gc', t.admin, { dryRun: true })).json().collect).toEqual([]);
  });
});
