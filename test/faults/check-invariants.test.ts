import { spawn } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import type { JobView } from '../../src/api/contract/job-view.js';
import { checkInvariants, type CheckInput, type HistoryLine, type ProcLine } from './check-invariants.js';
import { attemptGroupAlive, killGroups } from './processes.js';

type Attempt = JobView['stages'][number]['attempts'][number];
type Stage = JobView['stages'][number];

const attempt = (id: string, number: number, state: Attempt['state'], o: Partial<Attempt> = {}): Attempt => ({
  id,
  number,
  state,
  machine: 'a1',
  machineId: 'm_a1',
  gpus: [],
  gpuType: null,
  exitCode: state === 'succeeded' ? 0 : null,
  signal: null,
  reason: null,
  pid: 100 + number,
  outputs: state === 'succeeded' ? [{ path: 'out.txt', size: 10 }] : null,
  scheduledAt: 1000 * number,
  startedAt: 1000 * number + 10,
  finishedAt: 1000 * number + 500,
  ...o,
});

const stage = (name: string, attempts: Attempt[], o: Partial<Stage> = {}): Stage => ({
  name,
  state: attempts.some((a) => a.state === 'succeeded') ? 'succeeded' : 'failed',
  pool: 'cpu',
  needs: [],
  pendingReason: null,
  endReason: null,
  resources: { cpuMillis: 1000, memoryBytes: 1, gpu: null },
  attemptsUsed: attempts.length,
  maxAttempts: 2,
  lostUsed: 0,
  outputAttemptId: attempts.find((a) => a.state === 'succeeded')?.id ?? null,
  readySince: null,
  notBefore: null,
  finishedAt: 5000,
  attempts,
  ...o,
});

const jobOf = (stages: Stage[], o: Partial<JobView> = {}): JobView => ({
  id: 'job_1',
  name: 'j',
  team: 'default',
  priority: 50,
  labels: {},
  state: stages.every((s) => s.state === 'succeeded') ? 'succeeded' : 'failed',
  failureReason: null,
  cancelRequestedAt: null,
  createdAt: 0,
  updatedAt: 0,
  finishedAt: 6000,
  stages,
  ...o,
});

/** start and end lines for an attempt that ran as pid `pid` from t0 to t1. */
const ran = (a: Attempt, stageName: string, pid: number, t0: number, t1: number | null, code = 0, gpus = ''): HistoryLine[] => {
  const base = { job: 'job_1', stage: stageName, attempt: a.number, attemptId: a.id, machine: a.machine, gpus, pid };
  const lines: ProcLine[] = [{ ev: 'start', ...base, t: t0 }];
  if (t1 !== null) lines.push({ ev: 'end', ...base, t: t1, code });
  return lines;
};

const input = (jobs: JobView[], history: HistoryLine[], o: Partial<CheckInput> = {}): CheckInput => {
  const artifacts = new Map<string, string | null>();
  for (const j of jobs) for (const s of j.stages) if (s.outputAttemptId) artifacts.set(`${j.id}/${s.name}`, s.outputAttemptId + '\n');
  return { jobs, history, artifacts, wrote: new Map(), logs: new Map(), alive: () => false, now: 100_000, cancelBoundMs: 3000, ...o };
};

const invariants = (i: CheckInput) => checkInvariants(i).map((v) => v.invariant);

describe('the fault-suite invariant checker', () => {
  const a1 = attempt('att_1', 1, 'failed', { exitCode: 3 });
  const a2 = attempt('att_2', 2, 'succeeded');
  const good = () => jobOf([stage('s', [a1, a2])]);
  const goodHistory = [...ran(a1, 's', 201, 1010, 1400, 3), ...ran(a2, 's', 202, 2010, 2400)];

  it('passes a consistent run', () => {
    expect(checkInvariants(input([good()], goodHistory))).toEqual([]);
  });

  it('reports a succeeded attempt whose log is not what its process wrote: a line lost, a line twice', () => {
    const wrote = new Map([[a2.id, { stdout: 'start\nend 0\n', stderr: 'on m1\n' }]]);
    const same = new Map([[a2.id, { stdout: 'start\nend 0\n', stderr: 'on m1\n' }]]);
    expect(checkInvariants(input([good()], goodHistory, { wrote, logs: same }))).toEqual([]);
    const lost = new Map([[a2.id, { stdout: 'start\n', stderr: 'on m1\n' }]]);
    expect(invariants(input([good()], goodHistory, { wrote, logs: lost }))).toEqual(['log-is-output']);
    const twice = new Map([[a2.id, { stdout: 'start\nend 0\n', stderr: 'on m1\non m1\n' }]]);
    const vs = checkInvariants(input([good()], goodHistory, { wrote, logs: twice }));
    expect(vs.map((v) => v.detail)).toEqual([expect.stringMatching(/stderr: the process wrote 6 characters, the log has 12; first difference at 6/)]);
  });

  it('reports two succeeded attempts of one stage', () => {
    const b = attempt('att_1', 1, 'succeeded');
    const j = jobOf([stage('s', [b, a2], { outputAttemptId: a2.id })]);
    expect(invariants(input([j], [...ran(b, 's', 201, 1010, 1400), ...ran(a2, 's', 202, 2010, 2400)]))).toContain('one-succeeded-attempt');
  });

  it('reports a committed output from a lost attempt', () => {
    const lost = attempt('att_1', 1, 'lost');
    const j = jobOf([stage('s', [lost, a2], { outputAttemptId: lost.id })]);
    const vs = invariants(input([j], [...ran(lost, 's', 201, 1010, 1400), ...ran(a2, 's', 202, 2010, 2400)]));
    expect(vs).toContain('output-from-current-attempt');
    expect(vs).toContain('output-pointer');
  });

  it("reports a committed file that is not the committed attempt's, and a downstream that read another attempt", () => {
    const up = stage('up', [a1, a2]);
    const d = attempt('att_d', 1, 'succeeded');
    const down = stage('down', [d], { needs: ['up'] });
    const j = jobOf([up, down]);
    const read: HistoryLine = {
      ev: 'input',
      job: 'job_1',
      stage: 'down',
      attempt: 1,
      attemptId: d.id,
      machine: 'a1',
      gpus: '',
      pid: 203,
      t: 3000,
      from: 'up',
      read: a1.id,
    };
    const i = input([j], [...goodHistory, ...ran(d, 'down', 203, 2990, 3100), read]);
    i.artifacts.set('job_1/up', 'att_1\n');
    const vs = invariants(i);
    expect(vs).toContain('committed-artifact');
    expect(vs).toContain('input-is-committed');
  });

  it('reports overlapping GPU intervals, from the history and from the database', () => {
    const g1 = attempt('att_g1', 1, 'succeeded', { gpus: [0, 1], startedAt: 1000, finishedAt: 3000 });
    const g2 = attempt('att_g2', 1, 'succeeded', { gpus: [1], startedAt: 2000, finishedAt: 4000 });
    const j = jobOf([stage('x', [g1]), stage('y', [g2])]);
    const history = [...ran(g1, 'x', 301, 1010, 2990, 0, '0,1'), ...ran(g2, 'y', 302, 2010, 3990, 0, '1')];
    const vs = invariants(input([j], history));
    expect(vs).toContain('gpu-exclusive-history');
    expect(vs).toContain('gpu-exclusive-db');
    // The same devices one after the other, or on another machine, are fine.
    const later = attempt('att_g2', 1, 'succeeded', { gpus: [1], startedAt: 3000, finishedAt: 4000 });
    const ok = jobOf([stage('x', [g1]), stage('y', [later])]);
    expect(checkInvariants(input([ok], [...ran(g1, 'x', 301, 1010, 2990, 0, '0,1'), ...ran(later, 'y', 302, 3010, 3990, 0, '1')]))).toEqual([]);
  });

  it('ends a process with no end line at the harness kill, not before', () => {
    const lost = attempt('att_l', 1, 'lost', { gpus: [0], startedAt: 1000, finishedAt: 1500 });
    const next = attempt('att_n', 2, 'succeeded', { gpus: [0], startedAt: 2000, finishedAt: 3000 });
    const j = jobOf([stage('s', [lost, next])]);
    const history = [...ran(lost, 's', 401, 1010, null, 0, '0'), ...ran(next, 's', 402, 2010, 2990, 0, '0')];
    const killedLate: HistoryLine = { ev: 'harness', what: 'kill-machine', machine: 'a1', pids: [401], t: 2500 };
    expect(invariants(input([j], [...history, killedLate]))).toEqual(['gpu-exclusive-history']);
    const killedEarly: HistoryLine = { ev: 'harness', what: 'kill-machine', machine: 'a1', pids: [401], t: 1200 };
    expect(checkInvariants(input([j], [...history, killedEarly]))).toEqual([]);
  });

  it('reports a job that is not terminal', () => {
    const r = attempt('att_r', 1, 'running', { finishedAt: null });
    const j = jobOf([stage('s', [r], { state: 'running', outputAttemptId: null })], { state: 'running' });
    expect(invariants(input([j], ran(r, 's', 501, 1010, null)))).toEqual(['job-terminal']);
  });

  it('reports an attempt started after the cancel, or killed too late', () => {
    const c1 = attempt('att_c1', 1, 'canceled', { startedAt: 5000, finishedAt: 4000 });
    const j = jobOf([stage('s', [c1], { state: 'canceled', outputAttemptId: null })], { state: 'canceled', cancelRequestedAt: 4000 });
    const vs = invariants(input([j], ran(c1, 's', 601, 5010, 9500, 143)));
    expect(vs).toContain('cancel-no-new-start');
    expect(vs).toContain('cancel-kills-in-time');
  });

  describe('with a real process', () => {
    let pgid = 0;
    afterAll(() => void killGroups([pgid]));

    it('reports a live process of a canceled attempt, and not once it is gone', async () => {
      const p = spawn('sleep', ['60'], { detached: true, stdio: 'ignore', env: { ...process.env, GANTRY_ATTEMPT_ID: 'att_live' } });
      pgid = p.pid!;
      const exited = new Promise((r) => p.once('exit', r));
      const c = attempt('att_live', 1, 'canceled', { startedAt: 1000, finishedAt: 2000 });
      const j = jobOf([stage('s', [c], { state: 'canceled', outputAttemptId: null })], { state: 'canceled', cancelRequestedAt: 2000 });
      const history = ran(c, 's', pgid, 1010, null);
      expect(attemptGroupAlive(pgid, 'att_live')).toBe(true);
      expect(attemptGroupAlive(pgid, 'att_other')).toBe(false); // a reused pid is not the attempt
      expect(invariants(input([j], history, { alive: attemptGroupAlive }))).toEqual(['no-leftover-process']);
      killGroups([pgid]);
      await exited;
      expect(checkInvariants(input([j], history, { alive: attemptGroupAlive }))).toEqual([]);
    });
  });
});
