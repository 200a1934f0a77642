import { isJobState, type AttemptState, type JobState, type MachineHealth, type StageState } from './states.js';

/**
 * The `type` of an event (`noun:verb`, GET /v1/events and GET /v1/jobs/{id}/events). A job's,
 * stage's and attempt's state changes are `job:<state>`, `stage:<state>`, `attempt:<state>`, so a
 * client can follow states from the events alone (jobStateOfEvent).
 */
export type EventType =
  | `job:${JobState}`
  | 'job:cancel-requested'
  | `stage:${StageState}`
  | `attempt:${AttemptState}`
  | `machine:${MachineHealth}`
  | 'machine:registered'
  | 'machine:cordoned'
  | 'machine:uncordoned'
  | 'machine:draining'
  | 'machine:removed'
  | 'team:created'
  | 'team:changed'
  | 'token:created'
  | 'token:revoked'
  | 'leader:elected';

/** The state a `job:<state>` event says its job moved to; null for any other event. */
export function jobStateOfEvent(type: string): JobState | null {
  const s = type.startsWith('job:') ? type.slice(4) : '';
  return isJobState(s) ? s : null;
}
