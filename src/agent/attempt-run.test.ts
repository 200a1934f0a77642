import { describe, expect, it } from 'vitest';
import { canTransition } from '../domain/transition-table.js';
import { isComing, isListed, isLive, moveRun, newRun, RunPhase, runTransitions } from './attempt-run.js';

const a = { attemptId: 'att_1', token: 1, jobId: 'job_1', stageName: 's', attemptNumber: 1, command: ['true'], env: {}, gpuIndices: [], timeoutSeconds: null, inputs: [] };

describe('an attempt run on the agent', () => {
  it('moves only as the table says', () => {
    const phases = Object.values(RunPhase);
    const allowed = phases.flatMap((from) => phases.filter((to) => canTransition(runTransitions, from, to)).map((to) => `${from}>${to}`));
    expect(allowed).toEqual(['starting>running', 'starting>owed', 'starting>settled', 'running>owed', 'running>settled', 'owed>settled']);
    const run = newRun(a);
    moveRun(run, RunPhase.running);
    moveRun(run, RunPhase.owed);
    expect(() => moveRun(run, RunPhase.running)).toThrow(/owed → running is not a move a run makes/);
  });

  it('is listed in heartbeats until settled, a dropped one only while its process may run', () => {
    const run = newRun(a);
    expect([isLive(run), isListed(run)]).toEqual([true, true]);
    run.dropped = { kind: 'killed-by-server', detail: 'canceled' };
    expect([isLive(run), isListed(run)]).toEqual([false, true]);
    moveRun(run, RunPhase.owed);
    expect(isListed(run)).toBe(false);
    const owed = newRun(a);
    moveRun(owed, RunPhase.owed);
    expect([isLive(owed), isListed(owed)]).toEqual([false, true]);
    moveRun(owed, RunPhase.settled);
    expect(isListed(owed)).toBe(false);
  });

  it('says when an item of it is about to reach the reporter', () => {
    const run = newRun(a);
    // Being prepared: its acknowledgement is coming, until it is queued.
    expect(isComing(run, 0)).toBe(true);
    run.ackQueued = true;
    expect(isComing(run, 0)).toBe(false);
    // Running: its outcome may be coming only while its process is young (started after youngSince).
    moveRun(run, RunPhase.running);
    run.spawnedAt = 100;
    expect(isComing(run, 90)).toBe(true);
    expect(isComing(run, 100)).toBe(false);
    // Ended: its outcome is coming until its delivery begins, whatever its age.
    run.ended = true;
    expect(isComing(run, 1_000)).toBe(true);
    moveRun(run, RunPhase.owed);
    expect(isComing(run, 1_000)).toBe(true);
    run.outcomeQueued = true;
    expect(isComing(run, 1_000)).toBe(false);
    // A dropped run hands over nothing.
    const dropped = newRun(a);
    dropped.dropped = { kind: 'killed-by-server', detail: 'canceled' };
    expect(isComing(dropped, 0)).toBe(false);
  });
});
