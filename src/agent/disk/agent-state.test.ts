import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { appendFile, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { AssignmentWire } from '../../api/contract/agent-protocol.js';
import { AgentState, groupsOfAttempt, KEEP_REPORTED, survivingGroup } from './agent-state.js';
import { JOURNAL_FILE, readAttemptRecords } from './attempt-journal.js';
import { killProcessGroup } from '../attempt/process-group.js';

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
  const journal = () => join(dir, JOURNAL_FILE);

  it('records the exit durably in the journal and reads it back', async () => {
    const p = (await state.createAttempt(assignment('att_1')))!;
    expect(await state.readExit('att_1')).toBeNull();
    const exit = { exitCode: 1, signal: null, reason: null, finishedAt: '2024-01-01T00:00:00.000Z' };
    await state.writeExit('att_1', exit);
    expect(await state.readExit('att_1')).toEqual(exit);
    await state.writeExit('att_1', { ...exit, exitCode: 2 });
    expect((await state.readExit('att_1'))?.exitCode).toBe(2);
    // The directory holds only what the command uses; the records are in the journal.
    expect((await readdir(p.dir)).sort()).toEqual(['input', 'output', 'work']);
    expect(readAttemptRecords(dir, 'att_1')).toEqual({ assignment: assignment('att_1'), exit: { ...exit, exitCode: 2 } });
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

  it('reports a damaged line of the journal apart and reads the rest', async () => {
    await state.createAttempt(assignment('att_a'));
    await appendFile(journal(), '{not json\n');
    await state.createAttempt(assignment('att_b'));
    const { interrupted, broken } = await new AgentState(dir).scan();
    expect(interrupted.map((i) => i.assignment.attemptId).sort()).toEqual(['att_a', 'att_b']);
    expect(broken).toEqual([{ attemptId: expect.stringMatching(/attempts\.journal, line 2\)$/), error: expect.any(String) }]);
  });

  it('takes a cut last line (a crash of the host while appending) as never written, and appends after it cleanly', async () => {
    await state.createAttempt(assignment('att_torn'));
    await appendFile(journal(), '{"id":"att_torn","pid":{"pid": 12');
    const restarted = new AgentState(dir);
    const { interrupted, broken } = await restarted.scan();
    expect(broken).toEqual([]);
    expect(interrupted.map((i) => [i.assignment.attemptId, i.pid])).toEqual([['att_torn', null]]);
    await restarted.writePid('att_torn', 77);
    expect(readAttemptRecords(dir, 'att_torn')?.pid?.pid).toBe(77);
  });

  it('prunes reported attempts beyond the newest N and keeps every unreported one', async () => {
    for (let i = 0; i < 5; i++) {
      await state.createAttempt(assignment(`att_${i}`));
      await state.markReported(`att_${i}`, { result: 'accepted', at: `2024-01-01T00:00:0${i}.000Z` });
    }
    await state.createAttempt(assignment('att_open'));
    expect((await state.prune(2)).sort()).toEqual(['att_0', 'att_1', 'att_2']);
    expect((await state.attemptIds()).sort()).toEqual(['att_3', 'att_4', 'att_open']);
    expect(readAttemptRecords(dir, 'att_0')).toBeUndefined();
  });

  it('prunes in the order attempts were settled, reading no record', async () => {
    for (let i = 0; i < KEEP_REPORTED + 3; i++) {
      await state.createAttempt(assignment(`att_${i}`));
      await state.markReported(`att_${i}`, { result: 'accepted', at: new Date().toISOString() });
    }
    const reads = vi.spyOn(state, 'readReported');
    expect((await state.prune()).sort()).toEqual(['att_0', 'att_1', 'att_2']);
    expect(await state.attemptIds()).toHaveLength(KEEP_REPORTED);
    expect(reads).not.toHaveBeenCalled();
    // Nothing more to remove until another attempt is settled.
    expect(await state.prune()).toEqual([]);
  });

  it('after a restart, learns the settled order from the records once, at the scan', async () => {
    const at = (s: number) => `2024-01-01T00:00:0${s}.000Z`;
    for (const [id, s] of [
      ['att_c', 3],
      ['att_a', 1],
      ['att_b', 2],
    ] as const) {
      await state.createAttempt(assignment(id));
      await state.markReported(id, { result: 'accepted', at: at(s) });
    }
    const restarted = new AgentState(dir);
    await restarted.scan();
    expect(await restarted.prune(1)).toEqual(['att_a', 'att_b']);
  });

  it('reports from the exit record alone when the assignment record was lost with the host', async () => {
    const a = assignment('att_lost_assignment');
    await mkdir(join(dir, 'attempts', a.attemptId, 'work'), { recursive: true });
    const identity = { attemptId: a.attemptId, token: a.token, jobId: a.jobId, stageName: a.stageName, attemptNumber: a.attemptNumber };
    const exit = { exitCode: 0, signal: null, reason: null, finishedAt: new Date().toISOString(), attempt: identity };
    await writeFile(journal(), JSON.stringify({ id: a.attemptId, exit }) + '\n');
    const { finished, broken } = await new AgentState(dir).scan();
    expect(broken).toEqual([]);
    expect(finished.map((f) => f.assignment)).toEqual([expect.objectContaining(identity)]);
  });

  it('reads the record files of an older agent: an unreadable reported.json is absent, exit.json alone is enough', async () => {
    const legacy = async (id: string, files: Record<string, string>) => {
      await mkdir(join(dir, 'attempts', id, 'work'), { recursive: true });
      for (const [name, text] of Object.entries(files)) await writeFile(join(dir, 'attempts', id, name), text);
    };
    const a = assignment('att_old');
    const exit = { exitCode: 0, signal: null, reason: null, finishedAt: new Date().toISOString() };
    await legacy('att_old', { 'assignment.json': JSON.stringify(a), 'exit.json': JSON.stringify(exit), 'reported.json': '' });
    const b = assignment('att_old_cut');
    const identity = { attemptId: b.attemptId, token: b.token, jobId: b.jobId, stageName: b.stageName, attemptNumber: b.attemptNumber };
    await legacy('att_old_cut', { 'assignment.json': '', 'exit.json': JSON.stringify({ ...exit, attempt: identity }) });
    await legacy('att_old_bad', { 'assignment.json': JSON.stringify(assignment('att_old_bad')), 'exit.json': '{not json' });
    const restarted = new AgentState(dir);
    await restarted.init();
    const { finished, broken } = await restarted.scan();
    expect(finished.map((f) => f.assignment.attemptId).sort()).toEqual(['att_old', 'att_old_cut']);
    expect(broken.map((b) => b.attemptId)).toEqual(['att_old_bad']);
    await restarted.markReported('att_old', { result: 'accepted', at: new Date().toISOString() });
    await restarted.prune(0);
    expect(existsSync(join(dir, 'attempts', 'att_old'))).toBe(false);
  });

  it('reuses an emptied directory for the next attempt, and removes one the command left files in', async () => {
    const p = (await state.createAttempt(assignment('att_first')))!;
    await writeFile(p.stdout, '');
    await writeFile(p.stderr, 'some output\n');
    await writeFile(p.status, '0\n');
    await mkdir(join(p.input, 'prep'));
    await state.markReported('att_first', { result: 'accepted', at: new Date().toISOString() });
    await state.prune(0);
    const spares = () => readdir(join(dir, 'attempts')).then((names) => names.filter((n) => n.startsWith('.spare.')));
    expect(await spares()).toHaveLength(1);

    const next = (await state.createAttempt(assignment('att_next')))!;
    expect(await spares()).toHaveLength(0);
    // What the next attempt finds: its layout and an empty log, no status of the one before, no input of it.
    expect((await readdir(next.dir)).sort()).toEqual(['input', 'output', 'stdout.log', 'work']);
    expect(await readdir(next.input)).toEqual([]);
    expect(await readFile(next.stdout, 'utf8')).toBe('');

    // A spare laid out for the same upstreams keeps its input directories for the next such attempt.
    await mkdir(join(next.input, 'prep'));
    await state.markReported('att_next', { result: 'accepted', at: new Date().toISOString() });
    await state.prune(0);
    const withInput = { ...assignment('att_after_prep'), inputs: [{ stage: 'prep', attemptId: 'att_x', files: [] }] };
    const third = (await state.createAttempt(withInput))!;
    expect(await spares()).toHaveLength(0);
    expect(await readdir(third.input)).toEqual(['prep']);
    await state.createAttempt(assignment('att_no_inputs'));

    await writeFile(join(third.output, 'model.bin'), 'weights');
    await state.markReported('att_no_inputs', { result: 'accepted', at: new Date().toISOString() });
    await state.markReported('att_after_prep', { result: 'accepted', at: new Date().toISOString() });
    await state.prune(0);
    // att_no_inputs became a spare; att_after_prep, with a file in output/, was removed.
    expect(await spares()).toHaveLength(1);
    expect(await state.attemptIds()).toEqual([]);
  });

  it('removes the log files it is told are shipped (an empty one stays), and the directory is still reused', async () => {
    const p = (await state.createAttempt(assignment('att_logs')))!;
    await writeFile(p.stdout, 'key=SUPERSECRET\n');
    await writeFile(p.stderr, '');
    state.removeLogs('att_logs');
    expect([existsSync(p.stdout), existsSync(p.stderr)]).toEqual([false, true]);
    // Again (a settle retried, a restart): nothing there, nothing to do.
    state.removeLogs('att_logs');
    await state.markReported('att_logs', { result: 'accepted', at: new Date().toISOString() });
    await state.prune(0);
    const next = (await state.createAttempt(assignment('att_after_logs')))!;
    expect((await readdir(next.dir)).sort()).toEqual(['input', 'output', 'stderr.log', 'work']);
    expect(await readdir(join(dir, 'attempts'))).toEqual(['att_after_logs']);
  });

  it("makes an attempt's directory 0711 (on the way to its own) and its work/, output/, input/ 0700, whatever the umask", async () => {
    const before = process.umask(0o022);
    try {
      const p = (await state.createAttempt(assignment('att_modes')))!;
      const modes = await Promise.all([p.dir, p.work, p.output, p.input].map(async (d) => ((await stat(d)).mode & 0o777).toString(8)));
      expect(modes).toEqual(['711', '700', '700', '700']);
    } finally {
      process.umask(before);
    }
  });

  it('lays out a reused input/ for the new upstreams: renamed where it can, removed where it cannot', async () => {
    const withInputs = (id: string, ...stages: string[]) => ({ ...assignment(id), inputs: stages.map((stage) => ({ stage, attemptId: 'att_up', files: [] })) });
    const first = (await state.createAttempt(withInputs('att_1', 'a', 'b')))!;
    for (const d of ['a', 'b']) await mkdir(join(first.input, d));
    await state.markReported('att_1', { result: 'accepted', at: new Date().toISOString() });
    await state.prune(0);
    const second = (await state.createAttempt(withInputs('att_2', 'c')))!;
    expect(await readdir(second.input)).toEqual(['c']);
    await state.markReported('att_2', { result: 'accepted', at: new Date().toISOString() });
    await state.prune(0);
    const evil = await state.createAttempt(withInputs('att_3', '..'));
    // Not a name input/ may hold: the spare is given up and the directory made anew, empty.
    expect(await readdir(evil!.input)).toEqual([]);
  });

  it('keeps the journal short: rewritten with the attempts still known once it holds many more lines', async () => {
    for (let i = 0; i < 800; i++) {
      const id = `att_${i}`;
      await state.createAttempt(assignment(id));
      await state.writePid(id, 1000 + i);
      await state.writeExit(id, { exitCode: 0, signal: null, reason: null, finishedAt: new Date().toISOString() });
      await state.markReported(id, { result: 'accepted', at: new Date(Date.UTC(2024, 0, 1, 0, 0, 0, i)).toISOString() });
      await state.prune(10);
    }
    await state.createAttempt(assignment('att_open'));
    const lines = (await readFile(journal(), 'utf8')).split('\n').length - 1;
    // 800 attempts wrote 4,000 lines; what is left is under the 2,000 that start a compaction.
    expect(lines).toBeLessThan(2000);
    const restarted = new AgentState(dir);
    const { interrupted } = await restarted.scan();
    expect(interrupted.map((i) => i.assignment.attemptId)).toEqual(['att_open']);
    expect(readAttemptRecords(dir, 'att_799')?.pid?.pid).toBe(1799);
    expect(await restarted.prune(0)).toHaveLength(10);
  });

  it('writes when the assignment was received beside its record (for a person or a bench), and reads the record as before', async () => {
    const t0 = Date.now();
    await state.createAttempt(assignment('att_at'));
    const line = (await readFile(journal(), 'utf8')).split('\n').find((l) => l.includes('"att_at"'))!;
    const at = (JSON.parse(line) as { at?: number }).at;
    expect(at).toBeGreaterThanOrEqual(t0);
    expect(at).toBeLessThanOrEqual(Date.now());
    expect(readAttemptRecords(dir, 'att_at')).toEqual({ assignment: assignment('att_at') });
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
      // Recorded before the process started: another process took the pid since.
      expect(rec.recordedAtUptime).toBeGreaterThan(0);
      expect(survivingGroup({ ...rec, recordedAtUptime: rec.recordedAtUptime! - 3600 })).toBe(false);
      // An older agent's record, with the start time read at the spawn.
      const { recordedAtUptime: _, ...older } = rec;
      expect(survivingGroup({ ...older, startTime: '1' })).toBe(false);
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
