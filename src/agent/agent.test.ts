import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { AgentSettings, AssignmentWire } from '../api/contract/agent-protocol.js';
import { Agent } from './agent.js';
import { AgentState, KEEP_REPORTED, type ReportedRecord } from './disk/agent-state.js';
import { readAttemptRecords } from './disk/attempt-journal.js';
import type { DetectedMachine } from './machine/machine-detect.js';
import { processGroupAlive } from './attempt/process-group.js';
import { FakeServer, TEST_JOIN_TOKEN, fakeAssignment } from '../../test/support/fake-agent-server.js';

const machine: DetectedMachine = { name: 'cpu-1', cpuMillis: 2000, memoryBytes: 2 ** 30, gpus: [], gpusDeclared: false, region: null, labels: {} };

const assignment = (over: Partial<AssignmentWire> = {}): AssignmentWire => fakeAssignment('att_', over);

async function until(cond: () => boolean | Promise<boolean>, ms = 4000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

let dir: string;
let srv: FakeServer;
let agent: Agent | null;
let lines: string[];

async function startAgent(settings?: Partial<AgentSettings>, opts: { startedAssignments?: boolean } = {}): Promise<Agent> {
  Object.assign(srv.settings, settings);
  // Pids at once, so that a test can wait for one to learn that the process runs.
  agent = new Agent({
    joinToken: TEST_JOIN_TOKEN,
    serverUrl: srv.url,
    dataDir: join(dir, 'data'),
    machine,
    log: (l) => lines.push(l),
    retry: { tries: 2, baseMs: 20 },
    stopDeliverMs: 300,
    pidDelayMs: 0,
    verbose: true,
    ...opts,
  });
  await agent.start();
  return agent;
}

const reported = (attemptId: string) => new AgentState(join(dir, 'data')).readReported(attemptId);

/**
 * Until the attempt is settled and its runner forgotten: its `reported` record written, then a
 * heartbeat sent after that (an answer's outcomes are settled a turn of the event loop after its
 * assignments are taken: reporter.ts), so that a resend of it meets the journal, not its runner.
 */
async function settled(attemptId: string): Promise<void> {
  await until(async () => (await reported(attemptId)) !== null);
  const after = srv.events.length;
  await srv.waitFor((e) => e.type === 'heartbeat' && e.seq >= after);
}

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gantry-agent-'));
  srv = new FakeServer({ heartbeatMs: 500, leaseMs: 5000, killGraceMs: 300 });
  await srv.listen();
  agent = null;
  lines = [];
});

afterEach(async () => {
  await agent?.stop();
  await srv.close();
  await rm(dir, { recursive: true, force: true });
});

describe('Agent', () => {
  it('starts an assignment with the right env, ships logs, uploads outputs and reports exit 0', async () => {
    process.env.GANTRY_FROM_OUTSIDE = 'leak';
    try {
      await startAgent();
    } finally {
      delete process.env.GANTRY_FROM_OUTSIDE;
    }
    const a = assignment({
      command: [
        'sh',
        '-c',
        'env > "$GANTRY_OUTPUT_DIR/env.txt"; mkdir -p "$GANTRY_OUTPUT_DIR/sub"; printf hi > "$GANTRY_OUTPUT_DIR/sub/a.txt"; echo to-stdout; echo to-stderr >&2',
      ],
      env: { FOO: 'bar', GANTRY_JOB_ID: 'overridden?' },
      gpuIndices: [0, 2],
    });
    srv.push({ assignments: [a] });
    const done = await srv.waitFor((e) => e.type === 'complete' && e.attemptId === a.attemptId);
    expect(done.body).toMatchObject({ token: 7, exitCode: 0, signal: null, reason: null });
    const files = srv.outputs.get(a.attemptId)!;
    expect(done.body.outputs).toEqual([
      { path: 'env.txt', size: files.get('env.txt')!.length },
      { path: 'sub/a.txt', size: 2 },
    ]);
    expect(files.get('sub/a.txt')!.toString()).toBe('hi');
    const env = Object.fromEntries(
      files
        .get('env.txt')!
        .toString()
        .trim()
        .split('\n')
        .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
    );
    expect(env).toMatchObject({
      GANTRY_JOB_ID: 'job_1',
      GANTRY_STAGE: 'train',
      GANTRY_ATTEMPT: '1',
      GANTRY_ATTEMPT_ID: a.attemptId,
      CUDA_VISIBLE_DEVICES: '0,2',
      FOO: 'bar',
    });
    expect(env.GANTRY_FROM_OUTSIDE).toBeUndefined();
    expect(isAbsolute(env.GANTRY_OUTPUT_DIR!)).toBe(true);
    expect(isAbsolute(env.GANTRY_INPUT_DIR!)).toBe(true);

    const starts = srv.of('start', a.attemptId);
    expect(starts[0]!.body).toEqual({ token: 7, pid: null });
    expect((await srv.waitFor((e) => e.type === 'start' && e.body.pid !== null)).body.pid).toBeGreaterThan(0);
    const logged = srv.of('logs', a.attemptId).flatMap((e) => e.body.chunks as { stream: string; data: string }[]);
    expect(
      logged
        .filter((c) => c.stream === 'stdout')
        .map((c) => c.data)
        .join(''),
    ).toContain('to-stdout');
    expect(
      logged
        .filter((c) => c.stream === 'stderr')
        .map((c) => c.data)
        .join(''),
    ).toContain('to-stderr');
    await until(async () => (await reported(a.attemptId))?.result === 'accepted');
    expect(lines.some((l) => l.startsWith(`agent cpu-1: attempt ${a.attemptId} (job_1/train #1) started pid`))).toBe(true);
  });

  it('kills the process group when a heartbeat reply says kill, and reports nothing', async () => {
    await startAgent();
    const a = assignment({ command: ['sh', '-c', 'sleep 30 & sleep 30 & wait'] });
    srv.push({ assignments: [a] });
    const pgid: number = (await srv.waitFor((e) => e.type === 'start' && e.attemptId === a.attemptId && e.body.pid !== null)).body.pid;
    expect(processGroupAlive(pgid)).toBe(true);
    srv.push({ kill: [{ attemptId: a.attemptId, reason: 'canceled by user' }] });
    await until(() => !processGroupAlive(pgid), 2000);
    await until(async () => (await reported(a.attemptId)) !== null);
    expect(await reported(a.attemptId)).toMatchObject({ result: 'dropped', note: 'canceled by user' } satisfies Partial<ReportedRecord>);
    expect(srv.of('complete', a.attemptId)).toHaveLength(0);
    // The next heartbeat no longer names it.
    const after = srv.events.length;
    const hb = await srv.waitFor((e) => e.type === 'heartbeat' && e.seq >= after);
    expect(hb.body.running).toEqual([]);
  });

  it('runs an assignment started at placement with no acknowledgement: its pid and outcome go as any', async () => {
    await startAgent();
    const marker = join(dir, 'runs.txt');
    const a = assignment({ command: ['sh', '-c', 'echo run >> "$MARKER"'], env: { MARKER: marker }, started: true });
    srv.push({ assignments: [a, a] });
    await srv.waitFor((e) => e.type === 'complete' && e.attemptId === a.attemptId);
    // No acknowledgement: its pid (recorded at once here, pidDelayMs 0) is the only `started` item
    // there can be, and not even that where the outcome was queued before it went (reporter.ts
    // drops a waiting pid for the outcome: seen under load).
    const starts = srv.of('start', a.attemptId);
    expect(starts.filter((e) => e.body.pid === null)).toEqual([]);
    expect(starts.length).toBeLessThanOrEqual(1);
    expect(srv.answered.get(a.attemptId)).toEqual(['ok']);
    // A resend (a duplicate answer) runs nothing twice: the journal knows it.
    await settled(a.attemptId);
    srv.push({ assignments: [a] });
    await until(() => lines.some((l) => l.includes(`${a.attemptId} (job_1/train #1) was assigned again`)));
    expect((await readFile(marker, 'utf8')).trim().split('\n')).toEqual(['run']);
  });

  it('a started assignment the server says kill (canceled while its answer travelled) is killed, and nothing reported', async () => {
    await startAgent();
    const a = assignment({ command: ['sh', '-c', 'sleep 30'], started: true });
    srv.push({ assignments: [a] });
    const pgid: number = (await srv.waitFor((e) => e.type === 'start' && e.attemptId === a.attemptId && e.body.pid !== null)).body.pid;
    // Listed in the next heartbeat, whose answer says kill.
    const after = srv.events.length;
    await srv.waitFor((e) => e.type === 'heartbeat' && e.seq >= after && e.body.running.some((r: { attemptId: string }) => r.attemptId === a.attemptId));
    srv.push({ kill: [{ attemptId: a.attemptId, reason: 'attempt is canceled: job canceled' }] });
    await until(() => !processGroupAlive(pgid), 2000);
    await until(async () => (await reported(a.attemptId)) !== null);
    expect(await reported(a.attemptId)).toMatchObject({ result: 'dropped' });
    expect(srv.of('complete', a.attemptId)).toHaveLength(0);
  });

  it('asks for started assignments with its outcomes only where the server offers them, and unless told not to', async () => {
    const asked = async () => {
      const a = assignment({ attemptId: `att_${srv.events.length}`, command: ['true'] });
      srv.push({ assignments: [a] });
      return (await srv.waitFor((e) => e.type === 'report' && e.body.completed.some((c: { attemptId: string }) => c.attemptId === a.attemptId))).body;
    };
    // Each agent with a server of its own: a stopped agent's held heartbeat would take the next push.
    const fresh = async (settings: Partial<AgentSettings>) => {
      await agent?.stop();
      await srv.close();
      srv = new FakeServer({ heartbeatMs: 500, leaseMs: 5000, killGraceMs: 300, ...settings });
      await srv.listen();
      await rm(join(dir, 'data'), { recursive: true, force: true });
    };
    await fresh({ reportAssignments: true, startedAssignments: true });
    await startAgent();
    expect(await asked()).toMatchObject({ assignments: true, startAssignments: true });
    await fresh({ reportAssignments: true, startedAssignments: true });
    await startAgent({}, { startedAssignments: false });
    const old = await asked();
    expect(old.assignments).toBe(true);
    expect(old.startAssignments).toBeUndefined();
    // A server from before: the field would be refused.
    await fresh({ reportAssignments: true });
    await startAgent();
    expect((await asked()).startAssignments).toBeUndefined();
  });

  it('runs an assignment that arrives twice only once', async () => {
    await startAgent();
    const marker = join(dir, 'runs.txt');
    const a = assignment({ command: ['sh', '-c', 'echo run >> "$MARKER"'], env: { MARKER: marker } });
    srv.push({ assignments: [a, a] });
    await srv.waitFor((e) => e.type === 'complete' && e.attemptId === a.attemptId);
    await settled(a.attemptId);
    srv.push({ assignments: [a] });
    await until(() => lines.some((l) => l.includes(`${a.attemptId} (job_1/train #1) was assigned again`)));
    expect((await readFile(marker, 'utf8')).trim().split('\n')).toEqual(['run']);
    expect(srv.of('start', a.attemptId).filter((e) => e.body.pid === null)).toHaveLength(1);
    expect(srv.of('complete', a.attemptId)).toHaveLength(1);
  });

  it('downloads inputs to $GANTRY_INPUT_DIR/<stage>/<path> before the command runs', async () => {
    srv.artifacts.set('att_up', new Map([['data/x.txt', Buffer.from('hello')]]));
    await startAgent();
    const a = assignment({
      command: ['sh', '-c', 'cp "$GANTRY_INPUT_DIR/prep/data/x.txt" "$GANTRY_OUTPUT_DIR/copy.txt"'],
      inputs: [{ stage: 'prep', attemptId: 'att_up', files: [{ path: 'data/x.txt', size: 5 }] }],
    });
    srv.push({ assignments: [a] });
    const done = await srv.waitFor((e) => e.type === 'complete' && e.attemptId === a.attemptId);
    expect(done.body.exitCode).toBe(0);
    expect(srv.outputs.get(a.attemptId)?.get('copy.txt')?.toString()).toBe('hello');
  });

  it('fails the attempt, without running it, when an input path would escape its directory', async () => {
    await startAgent();
    const marker = join(dir, 'ran');
    const a = assignment({
      command: ['touch', marker],
      inputs: [{ stage: 'prep', attemptId: 'att_up', files: [{ path: '../../evil', size: 1 }] }],
    });
    srv.push({ assignments: [a] });
    const done = await srv.waitFor((e) => e.type === 'complete' && e.attemptId === a.attemptId);
    expect(done.body).toMatchObject({ exitCode: null, signal: null });
    expect(done.body.reason).toMatch(/^input download failed: refusing path/);
    await expect(readFile(marker)).rejects.toThrow();
  });

  it('after a restart, reports what finished while it was down before taking new work', async () => {
    const state = new AgentState(join(dir, 'data'));
    await state.init();
    const finished = assignment();
    const p = (await state.createAttempt(finished))!;
    await writeFile(join(p.output, 'model.bin'), 'weights');
    await state.writeExit(finished.attemptId, { exitCode: 0, signal: null, reason: null, finishedAt: new Date().toISOString() });
    // One that was running when the agent died, and died with it.
    const lost = assignment();
    await state.createAttempt(lost);
    const dead = spawn('true');
    await new Promise((r) => dead.once('exit', r));
    await state.writePid(lost.attemptId, dead.pid!);
    // One the previous agent had given up (killed on the server's word) when it ended: not reported.
    const given = assignment();
    await state.createAttempt(given);
    await state.writeExit(given.attemptId, {
      exitCode: null,
      signal: 'SIGTERM',
      reason: 'killed: canceled',
      finishedAt: new Date().toISOString(),
      dropped: 'canceled',
    });
    // One whose directory was being created when the agent died: nothing ran, nothing is kept.
    const half = assignment();
    await mkdir(join(dir, 'data', 'attempts', half.attemptId, 'work'), { recursive: true });

    await startAgent();
    const done = await srv.waitFor((e) => e.type === 'complete' && e.attemptId === finished.attemptId);
    expect(done.body).toMatchObject({ token: 7, exitCode: 0, outputs: [{ path: 'model.bin', size: 7 }] });
    const firstHeartbeat = srv.events.find((e) => e.type === 'heartbeat');
    expect(firstHeartbeat === undefined || firstHeartbeat.seq > done.seq).toBe(true);
    expect(srv.outputs.get(finished.attemptId)?.get('model.bin')?.toString()).toBe('weights');
    expect(await reported(finished.attemptId)).toMatchObject({ result: 'accepted' });
    expect(await reported(lost.attemptId)).toMatchObject({ result: 'abandoned' });
    expect(srv.of('complete', lost.attemptId)).toHaveLength(0);
    expect(await reported(given.attemptId)).toMatchObject({ result: 'dropped', note: 'canceled' });
    expect(srv.of('complete', given.attemptId)).toHaveLength(0);
    expect(await readdir(join(dir, 'data', 'attempts'))).not.toContain(half.attemptId);
  });

  it('on restart, re-attaches to an attempt still running from the previous agent, and reports how it ended', async () => {
    await startAgent();
    const a = assignment({ command: ['sh', '-c', 'sleep 1; echo done; exit 4'] });
    srv.push({ assignments: [a] });
    await srv.waitFor((e) => e.type === 'start' && e.attemptId === a.attemptId && e.body.pid !== null);
    await agent!.stop({ killRunning: false });
    expect(srv.of('complete', a.attemptId)).toHaveLength(0);
    await startAgent();
    const done = await srv.waitFor((e) => e.type === 'complete' && e.attemptId === a.attemptId);
    expect(done.body).toMatchObject({ exitCode: 4, signal: null, reason: null });
    await until(async () => (await reported(a.attemptId)) !== null);
    expect(await reported(a.attemptId)).toMatchObject({ result: 'accepted' });
  });

  it('on restart, kills a surviving group whose leader is gone (how it ended cannot be known), and reports nothing', async () => {
    const state = new AgentState(join(dir, 'data'));
    await state.init();
    const orphan = assignment();
    await state.createAttempt(orphan);
    // The leader (standing in for the shim) exits at once; what it started lives on in its group.
    const child = spawn('sh', ['-c', 'sleep 30 & sleep 0.3'], { detached: true, stdio: 'ignore' });
    await state.writePid(orphan.attemptId, child.pid!);
    await new Promise((r) => child.once('exit', r));
    expect(processGroupAlive(child.pid!)).toBe(true);

    await startAgent();
    await until(async () => (await reported(orphan.attemptId)) !== null);
    expect(processGroupAlive(child.pid!)).toBe(false);
    expect(await reported(orphan.attemptId)).toMatchObject({ result: 'dropped', note: expect.stringMatching(/no exit status recorded/) });
    expect(srv.of('complete', orphan.attemptId)).toHaveLength(0);
  });

  it('keeps an outcome it could not deliver before stopping, and delivers it on the next start', async () => {
    srv.failCompletes = true;
    await startAgent();
    const a = assignment({ command: ['sh', '-c', 'exit 3'] });
    srv.push({ assignments: [a] });
    await srv.waitFor((e) => e.type === 'complete' && e.attemptId === a.attemptId);
    await agent!.stop();
    expect(await reported(a.attemptId)).toBeNull();
    // Still named in heartbeats while owed, so its lease would not run out meanwhile.
    expect(srv.of('heartbeat').some((e) => e.body.running.some((r: { attemptId: string }) => r.attemptId === a.attemptId))).toBe(true);

    srv.failCompletes = false;
    const before = srv.events.length;
    await startAgent();
    const done = await srv.waitFor((e) => e.type === 'complete' && e.attemptId === a.attemptId && e.seq >= before);
    expect(done.body).toMatchObject({ exitCode: 3, reason: null, outputs: [] });
    // Recorded as delivered. 'duplicate' too: the stopped agent's last retry, cut off by its halt
    // after it was sent, may reach the server only once completes are taken again (a loaded
    // machine), and then the new agent's copy is the second.
    expect((await reported(a.attemptId))?.result).toMatch(/^(accepted|duplicate)$/);
  });

  it('does not run an attempt the server says is stale at start', async () => {
    await startAgent();
    const marker = join(dir, 'ran');
    const a = assignment({ command: ['touch', marker] });
    srv.stale.add(a.attemptId);
    srv.push({ assignments: [a] });
    await until(async () => (await reported(a.attemptId)) !== null);
    expect(await reported(a.attemptId)).toMatchObject({ result: 'dropped' });
    await expect(readFile(marker)).rejects.toThrow();
    // Acknowledged (and refused) once; no pid ever reported, no outcome, no pid record on disk.
    expect(srv.of('start', a.attemptId).map((e) => e.body.pid)).toEqual([null]);
    expect(srv.of('complete', a.attemptId)).toHaveLength(0);
    expect(await new AgentState(join(dir, 'data')).readPid(a.attemptId)).toBeNull();
  });

  it('reports the outcomes of attempts that end together in one request', async () => {
    await startAgent();
    // Each report is held a while, so what happens meanwhile queues behind it.
    srv.reportDelayMs = 200;
    const go = join(dir, 'go');
    const as = Array.from({ length: 6 }, () => assignment({ command: ['sh', '-c', 'while [ ! -e "$GO" ]; do sleep 0.02; done'], env: { GO: go } }));
    srv.push({ assignments: as });
    await until(() => as.every((a) => srv.of('start', a.attemptId).some((e) => e.body.pid !== null)), 8000);
    await writeFile(go, '');
    await until(() => as.every((a) => srv.answered.get(a.attemptId)?.[0] === 'ok'), 8000);
    const withOutcomes = srv.of('report').filter((e) => e.body.completed.length > 0);
    // The first outcome goes at once; the others end while it is held, and go together after it.
    expect(withOutcomes.length).toBeLessThanOrEqual(2);
    expect(Math.max(...withOutcomes.map((e) => e.body.completed.length))).toBeGreaterThanOrEqual(3);
    expect(withOutcomes.flatMap((e) => e.body.completed.map((c: { attemptId: string }) => c.attemptId)).sort()).toEqual(as.map((a) => a.attemptId).sort());
    // Six acknowledgements, six pids and six outcomes, in far fewer requests than eighteen.
    expect(srv.of('report').length).toBeLessThanOrEqual(8);
    for (const a of as) expect(srv.answered.get(a.attemptId)).toEqual(['ok']);
  });

  it('retries an outcome whose report fails with 503, and delivers it once', async () => {
    srv.failCompletesTimes = 2;
    await startAgent();
    const a = assignment({ command: ['sh', '-c', 'exit 4'] });
    srv.push({ assignments: [a] });
    await until(async () => (await reported(a.attemptId))?.result === 'accepted');
    // Sent three times: two answered 503 (nothing recorded), the third recorded.
    expect(srv.of('complete', a.attemptId)).toHaveLength(3);
    expect(srv.answered.get(a.attemptId)).toEqual(['ok']);
    expect(srv.of('complete', a.attemptId)[2]!.body).toMatchObject({ exitCode: 4, reason: null });
    expect(lines.some((l) => l.includes('report failed (1 in a row)'))).toBe(true);
  });

  it("waits out a shed heartbeat's Retry-After, jittered, then heartbeats on: a shed is not a failure", async () => {
    srv.shedHeartbeats = 2;
    srv.shedRetryAfter = 1;
    await startAgent({ shedding: true });
    await until(() => srv.of('heartbeat').length >= 4, 6000);
    const hb = srv.of('heartbeat');
    // It said so, to a server whose settings say it sheds.
    expect(hb[0]!.body).toMatchObject({ acceptsShedding: true, running: [] });
    // Each shed one waited for 1 s at least (its own backoff would be 200 ms), 1.25 s at most (the
    // jitter the server allows for), and the heartbeat answered after them was held as usual.
    for (const i of [1, 2]) {
      const gap = hb[i]!.at! - hb[i - 1]!.at!;
      expect(gap).toBeGreaterThanOrEqual(1000);
      expect(gap).toBeLessThan(1250 + 150);
    }
    expect(lines.some((l) => l.includes('heartbeat failed'))).toBe(false);
  });

  it('says it honours Retry-After only to a server that sheds (an older one refuses fields it does not know)', async () => {
    await startAgent();
    await until(() => srv.of('heartbeat').length >= 1);
    expect(srv.of('heartbeat')[0]!.body).not.toHaveProperty('acceptsShedding');
  });

  it("says in each heartbeat what its list knows of: the newest answer acted on, held back while a report's answer is awaited", async () => {
    srv.asOf = 5000;
    await startAgent({ knownAsOf: true, reportAssignments: true, startedAssignments: true });
    await until(() => srv.of('heartbeat').length >= 3);
    const hb = srv.of('heartbeat');
    // The first knows of no answer yet (the server's arrival rule then); the next, of the last answer's.
    expect(hb[0]!.body).not.toHaveProperty('knownAsOf');
    expect(hb[2]!.body.knownAsOf).toBe(5000);
    // A report whose answer is held: heartbeats answered with a newer time meanwhile do not vouch
    // for what that answer may carry (answers-known.ts).
    srv.reportDelayMs = 2500;
    const a = assignment({ command: ['true'], started: true });
    srv.push({ assignments: [a] });
    const report = await srv.waitFor((e) => e.type === 'report');
    srv.asOf = 9000;
    const answered = report.at! + 2500;
    await until(() => srv.of('heartbeat').some((e) => e.seq > report.seq && e.at! > answered + 50), 6000);
    const during = srv.of('heartbeat').filter((e) => e.seq > report.seq && e.at! < answered - 50);
    // At least one of them came after an answer that said 9000.
    expect(during.length).toBeGreaterThanOrEqual(2);
    expect(during.map((e) => e.body.knownAsOf)).toEqual(during.map(() => 5000));
    await until(() => srv.of('heartbeat').some((e) => e.body.knownAsOf === 9000), 4000);
  });

  it('sends no knownAsOf to a server whose settings do not say it (an older one refuses fields it does not know)', async () => {
    srv.asOf = 5000;
    await startAgent();
    await until(() => srv.of('heartbeat').length >= 3);
    expect(srv.of('heartbeat').filter((e) => 'knownAsOf' in e.body)).toEqual([]);
  });

  it('sends the typed end of an outcome to a server of protocol 2', async () => {
    await startAgent({ protocol: 2 });
    const exited = assignment({ command: ['sh', '-c', 'exit 4'] });
    const timedOut = assignment({ command: ['sleep', '30'], timeoutSeconds: 0.2 });
    const unstartable = assignment({ command: ['no-such-command-xyz'] });
    srv.push({ assignments: [exited, timedOut, unstartable] });
    for (const a of [exited, timedOut, unstartable]) await srv.waitFor((e) => e.type === 'complete' && e.attemptId === a.attemptId);
    expect(srv.of('complete', exited.attemptId)[0]!.body).toMatchObject({ exitCode: 4, reason: null, end: { kind: 'exited', detail: null } });
    expect(srv.of('complete', timedOut.attemptId)[0]!.body).toMatchObject({
      reason: 'timeout after 0.2 s',
      end: { kind: 'timeout', detail: 'timeout after 0.2 s' },
    });
    const failed = srv.of('complete', unstartable.attemptId)[0]!.body;
    expect(failed.end.kind).toBe('spawn-failed');
    expect(failed.end.detail).toBe(failed.reason);
  });

  it("a gang's rank 0 whose master port another process holds ends spawn-failed, saying so, without running; a free port is left for the member", async () => {
    await startAgent({ protocol: 2 });
    // The test holds a port, as a service outside Gantry would.
    const outside = http.createServer();
    await new Promise<void>((resolve) => outside.listen(0, '127.0.0.1', resolve));
    const port = (outside.address() as AddressInfo).port;
    try {
      const marker = join(dir, 'ran');
      const gang = { size: 2, masterAddr: '127.0.0.1', masterPort: port };
      const blocked = assignment({ command: ['sh', '-c', `touch ${marker}`], gang: { rank: 0, ...gang } });
      // Rank 1 listens on nothing: it is not checked.
      const other = assignment({ command: ['sh', '-c', 'exit 0'], gang: { rank: 1, ...gang } });
      srv.push({ assignments: [blocked, other] });
      const failed = (await srv.waitFor((e) => e.type === 'complete' && e.attemptId === blocked.attemptId)).body;
      const why = `spawn failed: gang master port ${port} on 127.0.0.1 is in use by another process (--gang-ports)`;
      expect(failed).toMatchObject({ exitCode: null, reason: why, end: { kind: 'spawn-failed', detail: why } });
      expect(existsSync(marker)).toBe(false);
      expect((await srv.waitFor((e) => e.type === 'complete' && e.attemptId === other.attemptId)).body).toMatchObject({ exitCode: 0 });
    } finally {
      await new Promise((resolve) => outside.close(resolve));
    }
    // Free now: rank 0 runs, and its member listens on MASTER_ADDR:MASTER_PORT (the check closed its own listener).
    const listen =
      "require('net').createServer().on('error',()=>process.exit(3)).listen(+process.env.MASTER_PORT,process.env.MASTER_ADDR,function(){this.close();})";
    const free = assignment({ command: [process.execPath, '-e', listen], gang: { rank: 0, size: 2, masterAddr: '127.0.0.1', masterPort: port } });
    srv.push({ assignments: [free] });
    expect((await srv.waitFor((e) => e.type === 'complete' && e.attemptId === free.attemptId)).body).toMatchObject({ exitCode: 0, end: { kind: 'exited' } });
  });

  it('sends no typed end to a server of protocol 1 (no `protocol` in its settings: it refuses fields it does not know)', async () => {
    await startAgent();
    const old = assignment({ command: ['sh', '-c', 'exit 3'] });
    srv.push({ assignments: [old] });
    const done = await srv.waitFor((e) => e.type === 'complete' && e.attemptId === old.attemptId);
    expect(done.body).toMatchObject({ exitCode: 3, reason: null });
    expect(done.body).not.toHaveProperty('end');
  });

  it("removes an attempt's log files once the server has all of them and its outcome is reported", async () => {
    await startAgent();
    const a = assignment({ command: ['sh', '-c', 'echo "key=$API_KEY"; echo warn >&2'], env: { API_KEY: 'SUPERSECRET-1234' } });
    srv.push({ assignments: [a] });
    await until(async () => (await reported(a.attemptId))?.result === 'accepted');
    expect(srv.logs.get(a.attemptId)).toMatchObject({ stdout: 'key=SUPERSECRET-1234\n', stderr: 'warn\n' });
    const attemptDir = join(dir, 'data', 'attempts', a.attemptId);
    await until(async () => !(await readdir(attemptDir)).some((f) => f.endsWith('.log')));
    expect(await readdir(attemptDir)).not.toContain('stdout.log');
  });

  it('a restarted agent goes on shipping a log from where the server has it, then removes the files', async () => {
    // The server takes what fits in 200 KiB (whole pieces of 128 KiB at most), then is down; the
    // agent stops with the outcome owed, not knowing how far the server got.
    srv.logBytesTaken = 200 * 1024;
    await startAgent();
    const a = assignment({ command: ['sh', '-c', 'i=0; while [ $i -lt 20000 ]; do echo "line $i of a long log"; i=$((i+1)); done; echo done >&2'] });
    srv.push({ assignments: [a] });
    await until(async () => (srv.logs.get(a.attemptId)?.at.stdout ?? 0) > 0 && readAttemptRecords(join(dir, 'data'), a.attemptId)?.exit !== undefined, 10_000);
    await agent!.stop();
    expect(srv.of('complete', a.attemptId)).toHaveLength(0);
    const files = ['stdout.log', 'stderr.log'].map((f) => join(dir, 'data', 'attempts', a.attemptId, f));
    const whole = await readFile(files[0]!, 'utf8');
    expect(srv.logs.get(a.attemptId)!.stdout.length).toBeLessThan(whole.length);

    srv.logBytesTaken = null;
    await startAgent();
    await srv.waitFor((e) => e.type === 'complete' && e.attemptId === a.attemptId, 10_000);
    // Every byte once: what the first agent shipped, then the rest from the server's offset.
    expect(srv.logs.get(a.attemptId)).toMatchObject({ stdout: whole, stderr: 'done\n' });
    await until(async () => (await reported(a.attemptId))?.result === 'accepted');
    await until(async () => files.every((f) => !existsSync(f)));
  }, 30_000);

  it('keeps the newest settled attempts as it goes, reading no record to choose', async () => {
    await startAgent();
    const reads = vi.spyOn(AgentState.prototype, 'readReported');
    try {
      // One after another, so that the order they settle in is the order they were given.
      const as = Array.from({ length: KEEP_REPORTED + 5 }, () => assignment());
      for (const a of as) {
        srv.push({ assignments: [a] });
        await until(async () => readAttemptRecords(join(dir, 'data'), a.attemptId)?.reported !== undefined);
      }
      const newest = as.slice(5).map((a) => a.attemptId);
      await until(async () => (await readdir(join(dir, 'data', 'attempts'))).filter((d) => !d.startsWith('.')).length === KEEP_REPORTED, 5000);
      expect((await readdir(join(dir, 'data', 'attempts'))).filter((d) => !d.startsWith('.')).sort()).toEqual(newest.sort());
      expect(reads).not.toHaveBeenCalled();
    } finally {
      reads.mockRestore();
    }
  }, 30_000);

  it("joins with the join token once, then speaks with the machine's own credential, kept (owner-only) for its next start", async () => {
    srv.credential = 'gantry_machine_one';
    await startAgent();
    await srv.waitFor((e) => e.type === 'heartbeat');
    expect(srv.of('register').map((e) => e.auth)).toEqual([TEST_JOIN_TOKEN]);
    expect(new Set(srv.of('heartbeat').map((e) => e.auth))).toEqual(new Set(['gantry_machine_one']));
    const file = join(dir, 'data', 'credential');
    expect((await readFile(file, 'utf8')).trim()).toBe('gantry_machine_one');
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    await agent!.stop();
    await startAgent();
    expect(srv.of('register').map((e) => e.auth)).toEqual([TEST_JOIN_TOKEN, 'gantry_machine_one']);
    // Revoked: it joins again with the join token, and keeps the new credential.
    await agent!.stop();
    srv.refused.add('gantry_machine_one');
    srv.credential = 'gantry_machine_two';
    await startAgent();
    expect(
      srv
        .of('register')
        .map((e) => e.auth)
        .slice(2),
    ).toEqual([TEST_JOIN_TOKEN]);
    expect((await readFile(file, 'utf8')).trim()).toBe('gantry_machine_two');
    expect(lines.join('\n')).toMatch(/credential was refused .*; joining again with the join token/);
  });

  it('registers again when the server no longer knows the machine', async () => {
    await startAgent({ heartbeatMs: 100 });
    srv.machines.clear();
    await srv.waitFor((e) => e.type === 'register' && e.seq > 0);
    const after = srv.events.length;
    const hb = await srv.waitFor((e) => e.type === 'heartbeat' && e.seq >= after);
    expect(hb).toBeDefined();
    expect(lines.some((l) => l.includes('registering again'))).toBe(true);
  });

  it('keeps to the period a heartbeat answer gives (grown with the fleet), and to the settings again after registering again', async () => {
    srv.periodMs = 250;
    await startAgent({ heartbeatMs: 100 });
    // The first asks the settings' hold; from the first answer on, the period it gave.
    expect((await srv.waitFor((e) => e.type === 'heartbeat')).body.waitMs).toBe(100);
    const given = await srv.waitFor((e) => e.type === 'heartbeat' && e.body.waitMs === 250);
    const next = await srv.waitFor((e) => e.type === 'heartbeat' && e.seq > given.seq);
    expect(next.body.waitMs).toBe(250);
    // A server that no longer says (an older one, after a restart) and does not know the machine: the settings' period.
    srv.periodMs = null;
    srv.machines.clear();
    const again = await srv.waitFor((e) => e.type === 'register' && e.seq > 0);
    const after = await srv.waitFor((e) => e.type === 'heartbeat' && e.seq > again.seq);
    expect(after.body.waitMs).toBe(100);
  });

  it("on a period longer than its disconnect grace, a held heartbeat is not silence: the grace grows with the period, as the server's lease does", async () => {
    // Held 1.5 s each, past the 0.8 s grace: without the growth (2 × (1500 − 100) ms) the watchdog would kill the stage mid-hold.
    srv.periodMs = 1500;
    await startAgent({ heartbeatMs: 100, leaseMs: 600, disconnectGraceMs: 800 });
    const a = assignment({ command: ['sleep', '3'] });
    srv.push({ assignments: [a] });
    const done = await srv.waitFor((e) => e.type === 'complete' && e.attemptId === a.attemptId, 8000);
    expect(done.body.exitCode).toBe(0);
    expect(srv.of('heartbeat').some((e) => e.body.waitMs === 1500)).toBe(true);
    expect(lines.some((l) => l.includes('killing 1 running attempt'))).toBe(false);
  });

  it('keeps its stages running while the server cannot be reached, for longer than the lease', async () => {
    await startAgent({ heartbeatMs: 100, leaseMs: 300, disconnectGraceMs: 10_000 });
    const a = assignment({ command: ['sleep', '1.2'] });
    srv.push({ assignments: [a] });
    const pgid: number = (await srv.waitFor((e) => e.type === 'start' && e.attemptId === a.attemptId && e.body.pid !== null)).body.pid;
    srv.failHeartbeats = true;
    await new Promise((r) => setTimeout(r, 800));
    expect(processGroupAlive(pgid)).toBe(true);
    srv.failHeartbeats = false;
    const done = await srv.waitFor((e) => e.type === 'complete' && e.attemptId === a.attemptId);
    expect(done.body.exitCode).toBe(0);
    expect(lines.some((l) => l.includes('killing 1 running attempt'))).toBe(false);
  });

  it('kills running attempts when heartbeats fail for longer than the disconnect grace', async () => {
    await startAgent({ heartbeatMs: 100, leaseMs: 600, disconnectGraceMs: 800 });
    const a = assignment({ command: ['sleep', '30'] });
    srv.push({ assignments: [a] });
    const pgid: number = (await srv.waitFor((e) => e.type === 'start' && e.attemptId === a.attemptId && e.body.pid !== null)).body.pid;
    srv.failHeartbeats = true;
    await until(() => !processGroupAlive(pgid), 3000);
    await until(async () => (await reported(a.attemptId)) !== null);
    expect((await reported(a.attemptId))?.note).toMatch(/^server unreachable/);
    expect(srv.of('complete', a.attemptId)).toHaveLength(0);
    expect(lines.some((l) => l.includes('killing 1 running attempt'))).toBe(true);
  });

  it("keeps a stage with a longer disconnectGraceSeconds of its own running past the cluster's grace", async () => {
    await startAgent({ heartbeatMs: 100, leaseMs: 600, disconnectGraceMs: 800 });
    const cheap = assignment({ command: ['sleep', '30'] });
    const precious = assignment({ command: ['sleep', '30'], disconnectGraceSeconds: 60 });
    srv.push({ assignments: [cheap, precious] });
    const pids = await Promise.all(
      [cheap, precious].map(
        async (a) => (await srv.waitFor((e) => e.type === 'start' && e.attemptId === a.attemptId && e.body.pid !== null)).body.pid as number,
      ),
    );
    srv.failHeartbeats = true;
    await until(() => !processGroupAlive(pids[0]!), 3000);
    expect(processGroupAlive(pids[1]!)).toBe(true);
    srv.failHeartbeats = false;
  });
});

describe('Agent stopped while it registers', () => {
  it('starts nothing afterwards: no heartbeats, no timers keeping the process alive', async () => {
    const base = await mkdtemp(join(tmpdir(), 'gantry-agent-stop-'));
    let heartbeats = 0;
    const server = http.createServer((req, res) => {
      if (req.url === '/v1/agent/register') {
        // Answer late: stop() arrives while the registration is in flight.
        setTimeout(() => {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ machineId: 'm_x', settings: { heartbeatMs: 100, leaseMs: 1000, killGraceMs: 100 } }));
        }, 300);
        return;
      }
      if (req.url?.includes('/heartbeat')) heartbeats++;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ health: 'ready', kill: [], assignments: [] }));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const agent = new Agent({ joinToken: TEST_JOIN_TOKEN, serverUrl: url, dataDir: join(base, 'data'), machine, log: () => {} });
    try {
      const started = agent.start();
      await new Promise((r) => setTimeout(r, 50));
      await agent.stop();
      await started;
      await new Promise((r) => setTimeout(r, 500));
      expect(heartbeats).toBe(0);
      // The lease watchdog is an interval: started after the stop, it would keep the process alive.
      expect((agent as unknown as { watchdog: unknown }).watchdog).toBeNull();
    } finally {
      server.close();
      await rm(base, { recursive: true, force: true });
    }
  });
});
