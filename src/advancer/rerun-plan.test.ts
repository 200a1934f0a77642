import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ConflictError } from '../domain/errors.js';
import { ValidationError } from '../spec/validation-error.js';
import type { JobState } from '../domain/job-state.js';
import type { StageState } from '../domain/stage-state.js';
import { parseJobSpec } from '../domain/job-spec.js';
import { planRerun, rerunStageState, type RerunSource } from './rerun-plan.js';

/** A job whose stages are in these states, each succeeded one holding one file. */
function source(stages: { name: string; needs?: string[]; state: StageState }[], state: JobState = 'failed'): RerunSource {
  return {
    jobId: 'job_1',
    state,
    definition: parseJobSpec({ name: 'j', stages: stages.map((s) => ({ name: s.name, needs: s.needs ?? [], command: ['true'] })) }),
    stages: stages.map((s) => ({
      name: s.name,
      needs: s.needs ?? [],
      state: s.state,
      outputs:
        s.state === 'succeeded'
          ? {
              fromJob: 'job_1',
              attemptId: `att_${s.name}`,
              runMs: 1000,
              gpus: s.name === 'train' ? 4 : 0,
              files: [{ path: 'f', blob: `sha256:${s.name}`, size: 1 }],
            }
          : null,
      outputsReleasedAt: null,
    })),
  };
}

describe('planRerun', () => {
  it('by default starts from every failed, skipped or canceled stage; reuses the rest; counts GPU-hours from the committed attempts', () => {
    const plan = planRerun(
      source([
        { name: 'prep', state: 'succeeded' },
        { name: 'train', needs: ['prep'], state: 'succeeded' },
        { name: 'eval', needs: ['train'], state: 'failed' },
        { name: 'report', needs: ['eval'], state: 'skipped' },
      ]),
      {},
    );
    expect(plan.from).toEqual(['eval', 'report']);
    expect(plan.reused.map((r) => r.stage)).toEqual(['prep', 'train']);
    expect(plan.rerun).toEqual([
      { stage: 'eval', because: null },
      { stage: 'report', because: null },
    ]);
    expect(plan.gpuMsSaved).toBe(4000);
    expect(plan.runMsSaved).toBe(2000);
  });

  it('says what to do instead of each refusal', () => {
    const s = source([
      { name: 'a', state: 'failed' },
      { name: 'b', needs: ['a'], state: 'skipped' },
    ]);
    expect(() => planRerun(s, { from: ['b'] })).toThrow(/stage a is failed in job job_1, so it cannot be reused: .*--from a/);
    expect(() => planRerun(s, { from: ['c'] })).toThrow(ValidationError);
    const running = source([{ name: 'a', state: 'running' }], 'running');
    expect(() => planRerun(running, {})).toThrow(/--cancel-running/);
    // Planned as if canceled: the unfinished stage runs again.
    expect(planRerun(running, { cancelRunning: true }).from).toEqual(['a']);
    const done = source([{ name: 'a', state: 'succeeded' }], 'succeeded');
    expect(() => planRerun(done, {})).toThrow(ConflictError);
    const released = source([
      { name: 'a', state: 'succeeded' },
      { name: 'b', needs: ['a'], state: 'failed' },
    ]);
    released.stages[0] = { ...released.stages[0]!, outputs: null, outputsReleasedAt: Date.UTC(2026, 0, 2) };
    expect(() => planRerun(released, {})).toThrow(
      /stage a's committed outputs in job job_1 are gone \(released 2026-01-02T00:00:00.000Z: the artifact store was over its size budget\)/,
    );
  });

  it('a stage that runs is ready when every stage it needs is reused', () => {
    expect(rerunStageState(['a', 'b'], new Set(['a', 'b']))).toBe('ready');
    expect(rerunStageState(['a', 'b'], new Set(['a']))).toBe('pending');
    expect(rerunStageState([], new Set())).toBe('ready');
  });

  // Any DAG (each stage needs some of the ones before it), any stages chosen: exactly the chosen
  // ones and what depends on them run; everything else is reused, and each runs because of a
  // stage that runs.
  it('reruns exactly the chosen stages and everything downstream of them', () => {
    const dag = fc.integer({ min: 1, max: 12 }).chain((n) =>
      fc.tuple(
        fc.tuple(...Array.from({ length: n }, (_, i) => fc.subarray(Array.from({ length: i }, (__, j) => `s${j}`)))),
        fc.subarray(
          Array.from({ length: n }, (_, i) => `s${i}`),
          { minLength: 1 },
        ),
      ),
    );
    fc.assert(
      fc.property(dag, ([needs, from]) => {
        const stages = needs.map((n, i) => ({ name: `s${i}`, needs: n, state: 'succeeded' as const }));
        const plan = planRerun(source(stages, 'succeeded'), { from });
        const downstream = new Set(from);
        for (const s of stages) if (s.needs.some((n) => downstream.has(n))) downstream.add(s.name);
        expect(plan.rerun.map((r) => r.stage)).toEqual(stages.map((s) => s.name).filter((n) => downstream.has(n)));
        expect(plan.reused.map((r) => r.stage)).toEqual(stages.map((s) => s.name).filter((n) => !downstream.has(n)));
        for (const r of plan.rerun) {
          if (r.because !== null) expect(downstream.has(r.because)).toBe(true);
          else expect(from).toContain(r.stage);
        }
      }),
    );
  });
});
