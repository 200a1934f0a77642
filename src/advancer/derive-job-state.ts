import type { JobState } from '../domain/job-state.js';
import { isStageTerminal, type StageState } from '../domain/stage-state.js';

/**
 * A job's state is a function of its stages' states (and whether a cancel was accepted):
 * all terminal → succeeded / failed / canceled; otherwise the furthest any stage has got.
 */
export function deriveJobState(stages: readonly StageState[], cancelRequested: boolean): JobState {
  if (stages.every(isStageTerminal)) {
    if (stages.includes('failed')) return 'failed';
    if (cancelRequested || stages.includes('canceled')) return 'canceled';
    return stages.every((s) => s === 'succeeded') ? 'succeeded' : 'failed';
  }
  if (stages.includes('running') || stages.includes('succeeded')) return 'running';
  if (stages.includes('scheduled')) return 'scheduled';
  if (stages.includes('ready')) return 'queued';
  return 'submitted';
}
