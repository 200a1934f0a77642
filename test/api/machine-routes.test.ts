import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { bearer, makeToken, registerMachine } from '../support/tokens.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { cpuMachine } from '../../src/store/conformance/fixtures.js';

/** The operator's machine routes: cordon, uncordon, drain, remove, and one machine by name or id. */
describe('machine routes', () => {
  let cp: ControlPlane;
  let auth: Record<string, string>;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-machines-'));
    // Not started: no scheduler or reconciler runs; the test places and ends attempts itself.
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0 }));
    auth = bearer(await makeToken(cp.store, 'admin'));
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const call = (method: 'GET' | 'POST' | 'DELETE', url: string) => cp.app.inject({ method, url, headers: auth });
  const register = (name: string) => registerMachine(cp.store, cpuMachine(name));
  const submit = async (name: string) => {
    const r = await cp.app.inject({
      method: 'POST',
      url: '/v1/jobs',
      headers: { ...auth, 'content-type': 'application/json' },
      payload: JSON.stringify({ name, stages: [{ name: 'a', resources: { cpu: 1, memory: '256Mi' }, command: ['true'] }] }),
    });
    expect(r.statusCode).toBe(201);
    return r.json().id as string;
  };
  const placeOn = async (jobId: string, machineId: string) => {
    const s = (await cp.store.jobGet({ jobId }))!.stages[0]!;
    const plan = { placements: [{ stageId: s.id, machineId, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 }], pending: [] };
    return (await cp.store.planApply({ plan, now: Date.now(), leaseMs: 60_000 })).applied[0]!;
  };

  it('cordon: 200 with the machine, by name or id; again: 200, unchanged; unknown: 404', async () => {
    const m = await register('c-1');
    const first = await call('POST', '/v1/machines/c-1/cordon');
    expect(first.statusCode).toBe(200);
    expect(first.json()).toMatchObject({ changed: true, machine: { name: 'c-1', health: 'ready', scheduling: 'cordoned' } });
    const again = await call('POST', `/v1/machines/${m.id}/cordon`);
    expect(again.statusCode).toBe(200);
    expect(again.json().changed).toBe(false);
    const unknown = await call('POST', '/v1/machines/nope/cordon');
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json()).toEqual({ error: 'not_found', message: 'machine nope not found' });
    expect((await call('GET', '/v1/machines/c-1')).json().scheduling).toBe('cordoned');
    expect((await call('GET', '/v1/machines/nope')).statusCode).toBe(404);
  });

  it('a stage that could only run on a cordoned machine waits, saying so; uncordon lets it be placed', async () => {
    await register('only-1');
    await call('POST', '/v1/machines/only-1/cordon');
    // c-1 (cordoned above) is the other machine.
    const jobId = await submit('waits');
    const job = (await call('GET', `/v1/jobs/${jobId}`)).json();
    expect(job.stages[0].pendingReason).toBe('no ready machine can run it: 2 cordoned');
    expect((await call('POST', '/v1/machines/only-1/uncordon')).json()).toMatchObject({ changed: true, machine: { scheduling: 'eligible' } });
    expect((await call('GET', `/v1/jobs/${jobId}`)).json().stages[0].pendingReason).toBeNull();
    expect((await call('POST', '/v1/machines/only-1/uncordon')).json().changed).toBe(false);
  });

  it('remove: 409 naming why for a machine in service or one still running something; drained: 200, gone, history kept', async () => {
    const m = await register('d-1');
    const refused = await call('DELETE', '/v1/machines/d-1');
    expect(refused.statusCode).toBe(409);
    expect(refused.json().error).toBe('conflict');
    expect(refused.json().message).toMatch(/^machine d-1 is ready and in service; .*drain it first/);

    const jobId = await submit('runs-there');
    const a = await placeOn(jobId, m.id);
    await cp.store.attemptStart({ attemptId: a.id, token: a.token, pid: 1, now: Date.now(), leaseMs: 60_000 });
    const drain = (await call('POST', '/v1/machines/d-1/drain')).json();
    expect(drain).toMatchObject({ changed: true, machine: { scheduling: 'draining', allocated: { attempts: 1 } } });
    const busy = await call('DELETE', '/v1/machines/d-1');
    expect(busy.statusCode).toBe(409);
    expect(busy.json().message).toMatch(/^machine d-1 is ready and draining, and 1 attempt there still holds resources/);

    // The stage ends and the agent stops listing it: nothing holds resources there any more.
    await cp.store.attemptComplete({
      attemptId: a.id,
      token: a.token,
      exitCode: 0,
      signal: null,
      end: { kind: 'exited' as const, detail: null },
      outputs: [],
      now: Date.now(),
      jitter: 0,
    });
    await cp.store.machineHeartbeat({ machineId: m.id, running: [], now: Date.now(), leaseMs: 60_000, missingAfterMs: 4000, jitter: 0 });
    expect((await call('GET', '/v1/machines/d-1')).json().scheduling).toBe('drained');
    expect((await call('POST', '/v1/machines/d-1/drain')).json()).toMatchObject({ changed: false, machine: { scheduling: 'drained' } });

    const removed = await call('DELETE', '/v1/machines/d-1');
    expect(removed.statusCode).toBe(200);
    expect(removed.json()).toMatchObject({ changed: true, machine: { name: 'd-1', scheduling: 'removed' } });
    expect((await call('GET', '/v1/machines')).json().machines.map((x: { name: string }) => x.name)).not.toContain('d-1');
    expect((await call('GET', '/v1/machines/d-1')).statusCode).toBe(404);
    expect((await call('DELETE', '/v1/machines/d-1')).statusCode).toBe(404);
    const job = (await call('GET', `/v1/jobs/${jobId}`)).json();
    expect(job.state).toBe('succeeded');
    expect(job.stages[0].attempts[0]).toMatchObject({ machine: 'd-1', machineId: m.id });
    // Its agent, still heartbeating, is told the machine is unknown, and registers again.
    const hb = await cp.app.inject({
      method: 'POST',
      url: `/v1/agent/machines/${m.id}/heartbeat`,
      headers: { ...bearer(m.credential), 'content-type': 'application/json' },
      payload: JSON.stringify({ running: [] }),
    });
    expect(hb.statusCode).toBe(404);
  });

  it('the routes are in the OpenAPI document', async () => {
    const paths = Object.keys((await call('GET', '/openapi.json')).json().paths);
    for (const p of ['/v1/machines/{machine}', '/v1/machines/{machine}/cordon', '/v1/machines/{machine}/uncordon', '/v1/machines/{machine}/drain']) {
      expect(paths).toContain(p);
    }
  });
});
