import type { TransitionTable } from './transition-table.js';

export const StageState = {
  /** Waiting for upstream stages. The advancer moves it to ready (all needs succeeded) or skipped. */
  pending: 'pending',
  /** In its pool's queue (after `notBefore` when backing off). The scheduler moves it to scheduled (or running, where a report asked). */
  ready: 'ready',
  /** An attempt was placed on a machine. The agent's start report moves it to running; a lost or
   *  unacknowledged attempt moves it back to ready. */
  scheduled: 'scheduled',
  /** Its current attempt runs. The attempt's outcome moves it on (the advancer decides where). */
  running: 'running',
  /** An attempt succeeded and its outputs are committed. Terminal. A stage a rerun reuses starts
   *  here, with the original's outputs and a `reused` marker (docs/rerun.md). */
  succeeded: 'succeeded',
  /** Its last attempt failed and no retries remain. Terminal. */
  failed: 'failed',
  /** The job was canceled before this stage finished. Terminal. */
  canceled: 'canceled',
  /** An upstream stage failed (or the job was failing) before this one started. Terminal. */
  skipped: 'skipped',
} as const;
export type StageState = (typeof StageState)[keyof typeof StageState];
export const stageStates = Object.values(StageState);

export const stageTransitions: TransitionTable<StageState> = {
  pending: ['ready', 'skipped', 'canceled'],
  // ready -> failed: waited past its queueTimeoutSeconds.
  // ready -> running: placed and started at once, on the machine whose report asked (docs/throughput.md).
  ready: ['scheduled', 'running', 'failed', 'skipped', 'canceled'],
  // scheduled -> succeeded/failed: the agent's start report may be lost while its outcome arrives.
  scheduled: ['running', 'ready', 'succeeded', 'failed', 'canceled'],
  running: ['ready', 'succeeded', 'failed', 'canceled'],
  succeeded: [],
  failed: [],
  canceled: [],
  skipped: [],
};

export function isStageTerminal(s: StageState): boolean {
  return stageTransitions[s].length === 0;
}
