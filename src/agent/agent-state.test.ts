import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { AssignmentWire } from '../api/contract/agent-protocol.js';
import { AgentState, groupsOfAttempt, KEEP_REPORTED, survivingGroup } from './agent-state.js';
import { killProcessGroup } from './process-group.js';

let dir: string;
let state: AgentState;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gantry-state-'));
  state = new AgentState(dir);
  await state.init();
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const assignment = (attemptId: string): AssignmentWire => ({
  attemptId,
  token: 3,
  jobId: 'job_1',
  stageName: 'train',
  attemptNumber: 1,
  command: ['true'],
  env: {},
  gpuIndices: [],
  timeoutSeconds: null,
  inputs: [],
});

describe('AgentState', () => {
  it('writes exit.json atomically and reads it back', async () => {
    const p = (await state.createAttempt(assignment('att_1')))!;
    expect(await state.readExit('att_1')).toBeNull();
    const exit = { exitCode: 1, signal: null, reason: null, finishedAt: '2024-01-01T00:00:00.000Z' };
    await state.writeExit('att_1', exit);
    expect(await state.readExit('att_1')).toEqual(exit);
    await state.writeExit('att_1', { ...exit, exitCode: 2 });
    expect((await state.readExit('att_1'))?.exitCode).toBe(2);
    // No temp file is left beside it.
    expect((await readdir(p.dir)).sort()).toEqual(['assignment.json', 'exit.json', 'input', 'output', 'work']);
    expect(JSON.parse(await readFile(p.assignment, 'utf8'))).toEqual(assignment('att_1'));
  });

  it('after a crash, lists finished-but-unreported and was-running attempts', async () => {
    const exit = { exitCode: 0, signal: null, reason: null, finishedAt: new Date().toISOString() };
    await state.createAttempt(assignment('att_done'));
    await state.writeExit('att_done', exit);
    await state.createAttempt(assignment('att_reported'));
    await state.writeExit('att_reported', exit);
    await state.markReported('att_reported', { result: 'accepted', at: new Date().toISOString() });
    await state.createAttempt(assignment('att_running'));
    await state.writePid('att_running', 424242);
    await state.createAttempt(assignment('att_never_spawned'));
    await mkdir(join(dir, 'attempts', 'att_half_created', 'work'), { recursive: true });

    // A new AgentState over the same directory stands for the restarted agent.
    const { finished, interrupted, incomplete, broken } = await new AgentState(dir).scan();
    expect(finished.map((f) => [f.assignment.attemptId, f.exit])).toEqual([['att_done', exit]]);
    expect(incomplete).toEqual(['att_half_created']);
    expect(interrupted.map((i) => [i.assignment.attemptId, i.pid?.pid ?? null]).sort()).toEqual([
      ['att_never_spawned', null],
      ['att_running', 424242],
    ]);
    expect(broken).toEqual([]);
  });

  it('reports an unreadable record apart instead of failing the scan', async () => {
    const p = (await state.createAttempt(assignment('att_bad')))!;
    await writeFile(p.exit, '{not json');
    const { finished, broken } = await state.scan();
    expect(finished).toEqual([]);
    expect(broken.map((b) => b.attemptId)).toEqual(['att_bad']);
  });

  it('takes a torn assignment or pid record (not fsynced: a crash of the host) as nothing owed, or as no pid', async () => {
    const torn = (await state.createAttempt(assignment('att_torn')))!;
    await writeFile(torn.assignment, '');
    const nopid = (await state.createAttempt(assignment('att_nopid')))!;
    await writeFile(nopid.pid, '{"pid": 12');
    const { interrupted, incomplete, broken } = await state.scan();
    expect(broken).toEqual([]);
    expect(incomplete).toEqual(['att_torn']);
    expect(interrupted.map((i) => [i.assignment.attemptId, i.pid])).toEqual([['att_nopid', null]]);
  });

  it('prunes reported attempts beyond the newest N and keeps every unreported one', async () => {
    for (let i = 0; i < 5; i++) {
      await state.createAttempt(assignment(`att_${i}`));
      await state.markReported(`att_${i}`, { result: 'accepted', at: `2024-01-01T00:00:0${i}.000Z` });
    }
    await state.createAttempt(assignment('att_open'));
    expect((await state.prune(2)).sort()).toEqual(['att_0', 'att_1', 'att_2']);
    expect((await state.attemptIds()).sort()).toEqual(['att_3', 'att_4', 'att_open']);
  });

  it('prunes in the order attempts were settled, reading no reported.json', async () => {
    for (let i = 0; i < KEEP_REPORTED + 3; i++) {
      await state.createAttempt(assignment(`att_${i}`));
      await state.markReported(`att_${i}`, { result: 'accepted', at: new Date().toISOString() });
    }
    // Were prune to read the records, it could not: every one is now unreadable.
    for (const id of await state.attemptIds()) await writeFile(state.paths(id).reported, '{not json');
    const reads = vi.spyOn(state, 'readReported');
    expect((await state.prune()).sort()).toEqual(['att_0', 'att_1', 'att_2']);
    expect(await state.attemptIds()).toHaveLength(KEEP_REPORTED);
    expect(reads).not.toHaveBeenCalled();
    // Nothing more to remove until another attempt is settled.
    expect(await state.prune()).toEqual([]);
  });

  it('after a restart, learns the settled order from the records once, at the scan', async () => {
    const at = (s: number) => `2024-01-01T00:00:0${s}.000Z`;
    for (const [id, s] of [['att_c', 3], ['att_a', 1], ['att_b', 2]] as const) {
      await state.createAttempt(assignment(id));
      await state.markReported(id, { result: 'accepted', at: at(s) });
    }
    const restarted = new AgentState(dir);
    await restarted.scan();
    expect(await restarted.prune(1)).toEqual(['att_a', 'att_b']);
  });

  it('takes an unreadable reported.json for absent, so the outcome is sent again', async () => {
    const exit = { exitCode: 0, signal: null, reason: null, finishedAt: new Date().toISOString() };
    const p = (await state.createAttempt(assignment('att_cut')))!;
    await state.writeExit('att_cut', exit);
    await writeFile(p.reported, '');
    const { finished, broken } = await new AgentState(dir).scan();
    expect(finished.map((f) => f.assignment.attemptId)).toEqual(['att_cut']);
    expect(broken).toEqual([]);
  });

  it('reports from exit.json alone when assignment.json was lost', async () => {
    const a = assignment('att_lost_assignment');
    const p = (await state.createAttempt(a))!;
    const identity = { attemptId: a.attemptId, token: a.token, jobId: a.jobId, stageName: a.stageName, attemptNumber: a.attemptNumber };
    await state.writeExit(a.attemptId, { exitCode: 0, signal: null, reason: null, finishedAt: new Date().toISOString(), attempt: identity });
    await writeFile(p.assignment, '');
    const { finished, broken } = await new AgentState(dir).scan();
    expect(broken).toEqual([]);
    expect(finished.map((f) => f.assignment)).toEqual([expect.objectContaining(identity)]);
  });

  it('creates an attempt once: a second time answers null', async () => {
    expect(await state.createAttempt(assignment('att_once'))).not.toBeNull();
    expect(await state.createAttempt(assignment('att_once'))).toBeNull();
  });

  it('refuses attempt ids that could leave the attempts directory', () => {
    expect(() => state.paths('../etc')).toThrow(/cannot name a directory/);
    expect(() => state.paths('a/b')).toThrow(/cannot name a directory/);
    expect(() => state.paths('')).toThrow(/cannot name a directory/);
  });
});

describe('survivingGroup', () => {
  it('recognises a live group it recorded, and not a dead or reused one', async () => {
    const child = spawn('sleep', ['30'], { detached: true, stdio: 'ignore' });
    await state.createAttempt(assignment('att_live'));
    await state.writePid('att_live', child.pid!);
    const rec = (await state.readPid('att_live'))!;
    try {
      expect(survivingGroup(rec)).toBe(true);
      if (rec.startTime !== null) expect(survivingGroup({ ...rec, startTime: '1' })).toBe(false);
      if (rec.bootId !== null) expect(survivingGroup({ ...rec, bootId: 'another-boot' })).toBe(false);
    } finally {
      await killProcessGroup(child.pid!, 200);
    }
    expect(survivingGroup(rec)).toBe(false);
  });
});

describe('groupsOfAttempt', () => {
  it('finds a process group by the attempt id in its environment', async () => {
    const child = spawn('sleep', ['30'], { detached: true, env: { ...process.env, GANTRY_ATTEMPT_ID: 'att_findme123' } });
    try {
      await new Promise((r) => setTimeout(r, 100));
      expect(groupsOfAttempt('att_findme123')).toEqual([child.pid]);
      expect(groupsOfAttempt('att_other')).toEqual([]);
    } finally {
      process.kill(-child.pid!, 'SIGKILL');
    }
  });
});
