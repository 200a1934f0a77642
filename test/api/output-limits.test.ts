import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AssignmentWire, HeartbeatResponse, RegisterResponse, ReportResponse } from '../../src/api/contract/agent-protocol.js';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { makeToken } from '../support/tokens.js';

const KiB = 1024;

/**
 * Output limits on the server's side (issue 28, attack item 3; docs/security.md, "Output limits"):
 * what the agent is told, and what the upload route refuses from an agent that ignores it, with
 * nothing of a refused upload kept and no attempt succeeding without its outputs.
 */
describe('output limits at the upload route', () => {
  let cp: ControlPlane;
  let dir: string;
  let admin = '';
  let machine: { id: string; credential: string };

  const call = async <T>(path: string, body: unknown, token: string): Promise<T> => {
    const r = await fetch(`${cp.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    if (!r.ok) throw new Error(`${path}: ${r.status} ${await r.text()}`);
    return r.json() as Promise<T>;
  };
  const report = (body: object) => call<ReportResponse>(`/v1/agent/machines/${machine.id}/report`, { started: [], completed: [], ...body }, machine.credential);
  /** A one-stage job of `team`, with `outputs` as its stage's limits.outputs, placed, acknowledged and running. */
  const running = async (team: string, outputs?: object): Promise<AssignmentWire> => {
    const name = `j${Math.random().toString(36).slice(2, 8)}`;
    const stage = { name: 'a', command: ['true'], resources: { cpu: '100m', memory: '16Mi' }, ...(outputs ? { limits: { outputs } } : {}) };
    const { id } = await call<{ id: string }>('/v1/jobs', { name, team, stages: [stage] }, admin);
    let a: AssignmentWire | undefined;
    // Earlier tests' attempts, not listed as running here, are lost and placed again: this job's is the one wanted.
    for (let i = 0; i < 50 && !a; i++) {
      const hb = await call<HeartbeatResponse>(`/v1/agent/machines/${machine.id}/heartbeat`, { running: [], waitMs: 200 }, machine.credential);
      a = hb.assignments.find((x) => x.jobId === id);
    }
    expect((await report({ started: [{ attemptId: a!.attemptId, token: a!.token, pid: null }] })).started[0]!.result).toBe('ok');
    return a!;
  };
  const put = (a: AssignmentWire, path: string, payload: Buffer | Readable) =>
    cp.app.inject({
      method: 'PUT',
      url: `/v1/agent/attempts/${a.attemptId}/outputs/${path}`,
      headers: { authorization: `Bearer ${machine.credential}`, 'x-gantry-token': String(a.token), 'content-type': 'application/octet-stream' },
      payload,
    });
  const succeed = (a: AssignmentWire, outputs: { path: string; size: number }[]) =>
    report({ completed: [{ attemptId: a.attemptId, token: a.token, exitCode: 0, signal: null, reason: null, outputs }] });
  /** The blob tree and the uploads' temporary files, as the server's disk holds them. */
  const disk = () => {
    const blobs = join(dir, 'artifacts', 'blobs', 'sha256');
    const tmp = join(dir, 'artifacts', 'tmp');
    return {
      blobs: existsSync(blobs) ? readdirSync(blobs).flatMap((d) => readdirSync(join(blobs, d))) : [],
      tmp: existsSync(tmp) ? readdirSync(tmp) : [],
    };
  };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-output-limits-'));
    cp = await createControlPlane(
      defaultServerConfig({
        dataDir: dir,
        port: 0,
        host: '127.0.0.1',
        heartbeatMs: 600,
        outputs: { stageDefault: { bytes: 64 * KiB, files: 2 }, stageMax: { bytes: 256 * KiB, files: 10 }, teamMaxBytes: 100 * KiB },
      }),
      { logger: false },
    );
    await cp.start();
    admin = await makeToken(cp.store, 'admin');
    const joinToken = await makeToken(cp.store, 'join');
    const reg = await call<RegisterResponse>(
      '/v1/agent/register',
      {
        name: 'm1',
        cpuMillis: 8000,
        memoryBytes: 8 * 2 ** 30,
        gpus: [],
        gpusDeclared: false,
        region: null,
        labels: {},
        agent: { version: 'test', host: 'test', pid: 1 },
      },
      joinToken,
    );
    machine = { id: reg.machineId, credential: reg.credential! };
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("the assignment carries the stage's limits: its own, the server's default, never above the server's most", async () => {
    expect((await running('alpha', { bytes: '16Ki' })).limits?.outputs).toEqual({ bytes: 16 * KiB, files: 2 });
    expect((await running('alpha')).limits?.outputs).toEqual({ bytes: 64 * KiB, files: 2 });
    expect((await running('alpha', { bytes: '1Gi', files: 99 })).limits?.outputs).toEqual({ bytes: 256 * KiB, files: 10 });
  });

  it('a body declared over the limit is refused before it is read: 413, no blob, nothing recorded; the attempt ends outputs-failed, not succeeded', async () => {
    const a = await running('beta', { bytes: '16Ki' });
    const before = disk();
    const r = await put(a, 'out/big.bin', Buffer.alloc(16 * KiB + 1));
    expect(r.statusCode).toBe(413);
    expect(r.json()).toEqual({
      error: 'outputs_too_large',
      message: "output out/big.bin (16.0 KiB) is over the stage's limit of 16 KiB: nothing of it was kept",
    });
    expect(r.headers.connection).toBe('close');
    expect(disk()).toEqual(before);
    expect(await cp.store.outputUploads({ attemptIds: [a.attemptId] })).toEqual([]);
    // An agent that claims success with it anyway is refused: the file was never uploaded.
    expect((await succeed(a, [{ path: 'out/big.bin', size: 16 * KiB + 1 }])).completed[0]).toMatchObject({
      result: 'refused',
      message: expect.stringContaining('output out/big.bin was not uploaded'),
    });
    // Ours ends it outputs-failed, saying why; nothing is committed.
    const failed = await report({
      completed: [
        {
          attemptId: a.attemptId,
          token: a.token,
          exitCode: null,
          signal: null,
          reason: 'output upload failed: 413 outputs_too_large (the process exited 0)',
          end: { kind: 'outputs-failed', detail: 'output upload failed: 413 outputs_too_large (the process exited 0)' },
          outputs: [],
        },
      ],
    });
    expect(failed.completed[0]!.result).toBe('ok');
    const att = (await cp.store.jobGet({ jobId: a.jobId }))!.stages[0]!.attempts[0]!;
    expect(att).toMatchObject({ state: 'failed', endKind: 'outputs-failed' });
    expect(await cp.store.committedBlob({ attemptId: a.attemptId, path: 'out/big.bin' })).toBeNull();
  });

  it('a body with no length is counted as it streams and cut off at the limit, never taken in whole', async () => {
    const a = await running('gamma', { bytes: '64Ki' });
    let pulled = 0;
    const chunk = Buffer.alloc(16 * KiB, 7);
    // 300 MiB if it were all read.
    const body = new Readable({
      read() {
        if (pulled >= 300 * 2 ** 20) return this.push(null);
        pulled += chunk.length;
        this.push(chunk);
      },
    });
    const before = disk();
    const r = await put(a, 'huge.bin', body);
    expect(r.statusCode).toBe(413);
    expect(r.json().message).toBe("output huge.bin (more than 64 KiB) is over the stage's limit of 64 KiB: nothing of it was kept");
    // Stopped near the limit: a few chunks of the stream's buffering past it, not 300 MiB.
    expect(pulled).toBeLessThan(2 * 2 ** 20);
    expect(disk()).toEqual(before);
    expect(await cp.store.outputUploads({ attemptIds: [a.attemptId] })).toEqual([]);
  });

  /** A rogue agent's PUT of up to 300 MB over a real connection, declared or chunked; resolves with the answer and what was written before it. */
  const rogue = (a: AssignmentWire, declared: boolean) => {
    const u = new URL(`${cp.url}/v1/agent/attempts/${a.attemptId}/outputs/big.bin`);
    let sent = 0;
    return new Promise<{ status: number; body: string; sent: number }>((resolve, reject) => {
      const req = http.request(u, {
        method: 'PUT',
        headers: {
          authorization: `Bearer ${machine.credential}`,
          'x-gantry-token': String(a.token),
          'content-type': 'application/octet-stream',
          ...(declared ? { 'content-length': String(300_000_000) } : {}),
        },
      });
      req.on('response', (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString()));
        res.on('end', () => {
          req.destroy();
          resolve({ status: res.statusCode ?? 0, body: text, sent });
        });
      });
      // The socket closing under the rest of the body is expected once the answer came.
      req.on('error', (err) => (sent > 0 ? undefined : reject(err)));
      const block = Buffer.alloc(64 * KiB);
      const pump = () => {
        while (sent < 300_000_000 && !req.destroyed) {
          sent += block.length;
          if (!req.write(block)) return void req.once('drain', pump);
        }
        if (!req.destroyed) req.end();
      };
      pump();
    });
  };

  it('a rogue agent declaring 300 MB over a real connection gets its 413 at once and sends almost none of it', async () => {
    const a = await running('delta', { bytes: '16Ki' });
    const answer = await rogue(a, true);
    expect(answer.status).toBe(413);
    expect(JSON.parse(answer.body)).toMatchObject({ error: 'outputs_too_large', message: expect.stringContaining('output big.bin (286.1 MiB)') });
    expect(answer.sent).toBeLessThan(300_000_000);
    expect(await cp.store.outputUploads({ attemptIds: [a.attemptId] })).toEqual([]);
  });

  it('a rogue agent streaming 300 MB chunked over a real connection gets its 413 once past the limit, the connection closed', async () => {
    const a = await running('zeta', { bytes: '16Ki' });
    const before = disk();
    const answer = await rogue(a, false);
    expect(answer.status).toBe(413);
    expect(JSON.parse(answer.body)).toEqual({
      error: 'outputs_too_large',
      message: "output big.bin (more than 16 KiB) is over the stage's limit of 16 KiB: nothing of it was kept",
    });
    expect(answer.sent).toBeLessThan(300_000_000);
    expect(disk()).toEqual(before);
    expect(await cp.store.outputUploads({ attemptIds: [a.attemptId] })).toEqual([]);
  });

  it("a file past the stage's count is refused (413), the ones before it are kept and may be sent again", async () => {
    const a = await running('epsilon', { files: 2 });
    expect((await put(a, 'one', Buffer.from('1'))).statusCode).toBe(204);
    expect((await put(a, 'two', Buffer.from('2'))).statusCode).toBe(204);
    const third = await put(a, 'three', Buffer.from('3'));
    expect(third.statusCode).toBe(413);
    expect(third.json()).toEqual({
      error: 'outputs_too_large',
      message: "output three would be file 3 of the attempt's outputs: over the stage's limit of 2 files",
    });
    expect((await put(a, 'two', Buffer.from('22'))).statusCode).toBe(204);
    expect((await cp.store.outputUploads({ attemptIds: [a.attemptId] })).map((x) => [x.path, x.size])).toEqual([
      ['one', 1],
      ['two', 2],
    ]);
  });

  it("a team's stored outputs are bounded: past the server's bound its new uploads are refused, another team's are not", async () => {
    // 60 KiB committed by one of vision's jobs.
    const first = await running('vision', { bytes: '128Ki' });
    expect((await put(first, 'w1', Buffer.alloc(30 * KiB, 1))).statusCode).toBe(204);
    expect((await put(first, 'w2', Buffer.alloc(30 * KiB, 2))).statusCode).toBe(204);
    expect(
      (
        await succeed(first, [
          { path: 'w1', size: 30 * KiB },
          { path: 'w2', size: 30 * KiB },
        ])
      ).completed[0]!.result,
    ).toBe('ok');
    // Its next job has 40 KiB left of the team's 100 KiB, though its stage may have 128 KiB.
    const next = await running('vision', { bytes: '128Ki' });
    const refused = await put(next, 'x', Buffer.alloc(50 * KiB, 3));
    expect(refused.statusCode).toBe(413);
    expect(refused.json().message).toBe(
      "output x (50 KiB) is over team vision's limit of 100 KiB of stored outputs (60 KiB committed): nothing of it was kept",
    );
    expect((await put(next, 'x', Buffer.alloc(40 * KiB, 4))).statusCode).toBe(204);
    // Another team has its own bound.
    const other = await running('nlp', { bytes: '128Ki' });
    expect((await put(other, 'y', Buffer.alloc(50 * KiB, 5))).statusCode).toBe(204);
  });

  it("a team's quota may set its own bound (gantry team set --quota outputs=Q), over the server's", async () => {
    const team = await fetch(`${cp.url}/v1/teams`, {
      method: 'POST',
      headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'small', quota: { outputs: '8Ki' } }),
    });
    expect(team.status).toBe(201);
    expect(await team.json()).toMatchObject({ quotaText: 'outputs=8Ki' });
    const bad = await fetch(`${cp.url}/v1/teams/small`, {
      method: 'PATCH',
      headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
      body: JSON.stringify({ quota: { outputs: 'plenty' } }),
    });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ issues: [{ path: '/quota/outputs', message: expect.stringContaining('"plenty" is not a memory quantity') }] });
    const a = await running('small');
    const r = await put(a, 'x', Buffer.alloc(9 * KiB));
    expect(r.statusCode).toBe(413);
    expect(r.json().message).toBe("output x (9 KiB) is over team small's limit of 8 KiB of stored outputs (0 bytes committed): nothing of it was kept");
    expect((await put(a, 'x', Buffer.alloc(8 * KiB))).statusCode).toBe(204);
  });
});
