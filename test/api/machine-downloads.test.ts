import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { cpuMachine } from '../../src/store/conformance/fixtures.js';
import type { MachineRecord } from '../../src/store/records.js';
import { bearer, makeToken, registerMachine } from '../support/tokens.js';
import { logLines } from '../support/log-lines.js';

/**
 * Issue 28: any machine credential downloaded any committed output by attempt id. Now a machine
 * reads an output only as an input of a stage placed on it and active; anything else is 404, as
 * if it did not exist, and logged. People's downloads are as they were.
 */
describe('GET /v1/agent/artifacts: a machine downloads only the inputs of its stages', () => {
  let cp: ControlPlane;
  let dir: string;
  let m1: MachineRecord & { credential: string };
  let m2: MachineRecord & { credential: string };
  let admin = '';
  const { logger, lines } = logLines('warn');
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-machine-downloads-'));
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0 }), { logger });
    admin = await makeToken(cp.store, 'admin');
    m1 = await registerMachine(cp.store, cpuMachine('m1'));
    m2 = await registerMachine(cp.store, cpuMachine('m2'));
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const place = async (jobId: string, stage: string, m: MachineRecord) => {
    const s = (await cp.store.jobGet({ jobId }))!.stages.find((x) => x.name === stage)!;
    return (
      await cp.store.planApply({
        plan: { placements: [{ stageId: s.id, machineId: m.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 }], pending: [] },
        now: Date.now(),
        leaseMs: 60_000,
      })
    ).applied[0]!;
  };
  const agent = (m: { credential: string }, method: 'GET' | 'PUT' | 'POST', url: string, payload?: string, headers: Record<string, string> = {}) =>
    cp.app.inject({ method, url, headers: { ...bearer(m.credential), ...headers }, ...(payload !== undefined ? { payload } : {}) });
  /** Placed on `m`, started, `files` uploaded, ended with `exitCode`. */
  const run = async (jobId: string, stage: string, m: MachineRecord & { credential: string }, files: Record<string, string> = {}, exitCode = 0) => {
    const a = await place(jobId, stage, m);
    await agent(m, 'POST', `/v1/agent/attempts/${a.id}/start`, JSON.stringify({ token: a.token, pid: null }), { 'content-type': 'application/json' });
    for (const [path, text] of Object.entries(files)) {
      const up = await agent(m, 'PUT', `/v1/agent/attempts/${a.id}/outputs/${path}`, text, {
        'x-gantry-token': String(a.token),
        'content-type': 'application/octet-stream',
      });
      expect(up.statusCode).toBe(204);
    }
    const outputs = Object.entries(files).map(([path, text]) => ({ path, size: Buffer.byteLength(text) }));
    const r = await agent(
      m,
      'POST',
      `/v1/agent/machines/${m.id}/report`,
      JSON.stringify({ started: [], completed: [{ attemptId: a.id, token: a.token, exitCode, signal: null, reason: null, outputs }] }),
      { 'content-type': 'application/json' },
    );
    expect(r.json().completed[0].result).toBe('ok');
    return a;
  };
  const submit = async (stages: object[]) =>
    (
      await cp.app.inject({
        method: 'POST',
        url: '/v1/jobs',
        headers: { ...bearer(admin), 'content-type': 'application/json' },
        payload: JSON.stringify({ name: 'dl', stages }),
      })
    ).json<{ id: string }>().id;

  it('404 until a stage that needs the output is placed on the machine; 200 while it is active there; 404 again once it ended; refusals logged', async () => {
    const id = await submit([
      { name: 'prep', command: ['true'] },
      { name: 'train', needs: ['prep'], command: ['true'] },
      { name: 'side', command: ['true'] },
    ]);
    const prep = await run(id, 'prep', m1, { 'data.txt': 'secret data' });
    const url = `/v1/agent/artifacts/${prep.id}/data.txt`;
    // The machine that made it, and any other: nothing placed there needs it.
    expect((await agent(m1, 'GET', url)).statusCode).toBe(404);
    const refused = await agent(m2, 'GET', url);
    expect(refused.statusCode).toBe(404);
    expect(refused.json()).toEqual({ error: 'not_found', message: `artifact ${prep.id}/data.txt not found` });
    expect(lines.find((l) => l.machineId === m2.id && l.attemptId === prep.id)?.msg).toBe(
      'machine download refused: not an input of a stage placed on that machine',
    );
    // A stage of the same job that does not need it, placed on m1, does not open it to m1.
    await place(id, 'side', m1);
    expect((await agent(m1, 'GET', url)).statusCode).toBe(404);
    const train = await place(id, 'train', m2);
    const read = await agent(m2, 'GET', url);
    expect([read.statusCode, read.body]).toEqual([200, 'secret data']);
    expect((await agent(m1, 'GET', url)).statusCode).toBe(404);
    // A file it does not have is as not found as one it may not read.
    expect((await agent(m2, 'GET', `/v1/agent/artifacts/${prep.id}/other.txt`)).statusCode).toBe(404);
    // Ended: its machine reads it no longer.
    await agent(
      m2,
      'POST',
      `/v1/agent/machines/${m2.id}/report`,
      JSON.stringify({ started: [], completed: [{ attemptId: train.id, token: train.token, exitCode: 0, signal: null, reason: null, outputs: [] }] }),
      { 'content-type': 'application/json' },
    );
    expect((await agent(m2, 'GET', url)).statusCode).toBe(404);
    // People's downloads are unchanged: the job's outputs by stage.
    const mine = await cp.app.inject({ method: 'GET', url: `/v1/jobs/${id}/stages/prep/outputs/data.txt`, headers: bearer(admin) });
    expect([mine.statusCode, mine.body]).toEqual([200, 'secret data']);
  });
});
