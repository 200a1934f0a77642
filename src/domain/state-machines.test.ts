import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { advance, type AttemptOutcome, type StageNode } from '../advancer/advance.js';
import { deriveJobState } from '../advancer/derive-job-state.js';
import { attemptStates, attemptTransitions } from './attempt-state.js';
import { DEFAULT_RETRY } from './job-definition.js';
import { jobStates, jobTransitions } from './job-state.js';
import { machineHealths, machineTransitions } from './machine-health.js';
import { machineSchedulings, machineSchedulingTransitions } from './machine-scheduling.js';
import { stageStates, stageTransitions } from './stage-state.js';
import { canTransition, terminalStates, type TransitionTable } from './transition-table.js';

// The allowed moves, written out independently of the tables: a change to a table has to be
// made here too, on purpose.
const allowed = {
  job: 'submitted>queued submitted>scheduled submitted>running submitted>succeeded submitted>failed submitted>canceled queued>scheduled queued>running queued>succeeded queued>failed queued>canceled scheduled>queued scheduled>running scheduled>succeeded scheduled>failed scheduled>canceled running>queued running>scheduled running>succeeded running>failed running>canceled',
  stage:
    'pending>ready pending>skipped pending>canceled ready>scheduled ready>running ready>failed ready>skipped ready>canceled scheduled>running scheduled>ready scheduled>succeeded scheduled>failed scheduled>canceled running>ready running>succeeded running>failed running>canceled',
  attempt:
    'scheduled>running scheduled>succeeded scheduled>failed scheduled>lost scheduled>preempted scheduled>canceled running>succeeded running>failed running>lost running>preempted running>canceled',
  machine: 'ready>suspect ready>lost suspect>ready suspect>lost lost>ready',
  machineScheduling:
    'eligible>cordoned eligible>draining eligible>removed cordoned>eligible cordoned>draining cordoned>removed draining>eligible draining>removed removed>eligible',
};

function checkTable<S extends string>(name: string, states: readonly S[], table: TransitionTable<S>, spec: string) {
  const expected = new Set(spec.split(' '));
  describe(`${name} transitions`, () => {
    for (const from of states) {
      for (const to of states) {
        const ok = expected.has(`${from}>${to}`);
        it(`${from} -> ${to} is ${ok ? 'allowed' : 'refused'}`, () => {
          expect(canTransition(table, from, to)).toBe(ok);
        });
      }
    }
  });
}

checkTable('job', jobStates, jobTransitions, allowed.job);
checkTable('stage', stageStates, stageTransitions, allowed.stage);
checkTable('attempt', attemptStates, attemptTransitions, allowed.attempt);
checkTable('machine', machineHealths, machineTransitions, allowed.machine);
checkTable('machine scheduling', machineSchedulings, machineSchedulingTransitions, allowed.machineScheduling);

describe('terminal states', () => {
  it('are exactly the ends of each lifecycle', () => {
    expect(terminalStates(jobTransitions).sort()).toEqual(['canceled', 'failed', 'succeeded']);
    expect(terminalStates(stageTransitions).sort()).toEqual(['canceled', 'failed', 'skipped', 'succeeded']);
    expect(terminalStates(attemptTransitions).sort()).toEqual(['canceled', 'failed', 'lost', 'preempted', 'succeeded']);
    expect(terminalStates(machineTransitions)).toEqual([]);
    expect(terminalStates(machineSchedulingTransitions)).toEqual([]);
  });
});

describe('the advancer and the derived job state only make allowed moves', () => {
  const outcome = fc.oneof(
    fc.constant<AttemptOutcome>({ kind: 'succeeded' }),
    fc.integer({ min: 1, max: 3 }).map<AttemptOutcome>((exitCode) => ({ kind: 'failed', end: 'exited', exitCode, signal: null, detail: null })),
    fc.constant<AttemptOutcome>({ kind: 'lost', reason: 'machine lost' }),
  );
  // A random DAG: stage i may need any stage before it.
  const dag = fc
    .integer({ min: 1, max: 8 })
    .chain((n) => fc.tuple(...Array.from({ length: n }, (_, i) => fc.subarray(Array.from({ length: i }, (_, j) => `s${j}`)))));

  it('over random DAGs and outcome sequences', () => {
    fc.assert(
      fc.property(dag, fc.array(fc.tuple(fc.nat(), outcome), { maxLength: 40 }), (needs, events) => {
        let stages: StageNode[] = needs.map((n, i) => ({
          name: `s${i}`,
          state: n.length === 0 ? 'ready' : 'pending',
          needs: n,
          attemptsUsed: 0,
          lostUsed: 0,
          retry: { ...DEFAULT_RETRY, maxAttempts: 2, maxLost: 1 },
        }));
        let jobState = deriveJobState(
          stages.map((s) => s.state),
          false,
        );
        for (const [pick, o] of events) {
          // An outcome can only happen to a stage that has an attempt: run a ready one first.
          const runnable = stages.filter((s) => s.state === 'ready' || s.state === 'running');
          if (runnable.length === 0) break;
          const target = runnable[pick % runnable.length]!;
          if (target.state === 'ready') target.state = 'running';
          const changes = advance(stages, { stage: target.name, outcome: o }, 0, 0.5);
          for (const c of changes) {
            expect(canTransition(stageTransitions, c.from, c.to)).toBe(true);
            const s = stages.find((x) => x.name === c.name)!;
            expect(s.state).toBe(c.from);
            stages = stages.map((x) =>
              x.name === c.name ? { ...x, state: c.to, attemptsUsed: c.attemptsUsed ?? x.attemptsUsed, lostUsed: c.lostUsed ?? x.lostUsed } : x,
            );
          }
          const next = deriveJobState(
            stages.map((s) => s.state),
            false,
          );
          if (next !== jobState) expect(canTransition(jobTransitions, jobState, next)).toBe(true);
          jobState = next;
          // A pending stage is never left behind once its needs all succeeded, unless the job is failing.
          const failing = stages.some((s) => s.state === 'failed');
          for (const s of stages) {
            if (s.state === 'pending' && !failing) {
              expect(s.needs.every((n) => stages.find((x) => x.name === n)!.state === 'succeeded')).toBe(false);
            }
          }
        }
      }),
      { numRuns: 300 },
    );
  });
});
