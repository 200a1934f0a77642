import { ATTEMPT_STATES, isJobState, JOB_STATES, MACHINE_HEALTHS, STAGE_STATES, type JobState } from './states.js';

/**
 * Every `type` an event has (`noun:verb`; GET /v1/events and GET /v1/jobs/{id}/events). A job's,
 * stage's and attempt's state changes are `job:<state>`, `stage:<state>`, `attempt:<state>`, so a
 * client can follow states from the events alone (jobStateOfEvent); a machine's health changes are
 * `machine:<health>`. test/api/event-types.test.ts holds the server to this list; who may see each
 * type is src/api/event-visibility.ts's.
 */
export const EVENT_TYPES = [
  ...JOB_STATES.map((s) => `job:${s}` as const),
  'job:cancel-requested',
  'job:rerun',
  ...STAGE_STATES.map((s) => `stage:${s}` as const),
  'stage:reused',
  'stage:outputs-released',
  ...ATTEMPT_STATES.map((s) => `attempt:${s}` as const),
  // Its log passed the head's cap and bytes between the head and the tail were dropped (docs/agent.md, "Logs").
  'attempt:log-cut',
  ...MACHINE_HEALTHS.map((s) => `machine:${s}` as const),
  'machine:registered',
  'machine:cordoned',
  'machine:uncordoned',
  'machine:draining',
  'machine:removed',
  // The autoscaler's decisions on the machines it starts (issue 30, docs/autoscaling.md "The store").
  'autoscale:start',
  'autoscale:requested',
  'autoscale:joined',
  'autoscale:hold',
  'autoscale:drain',
  'autoscale:keep',
  'autoscale:release',
  'autoscale:fail',
  'autoscale:stopped',
  'team:created',
  'team:changed',
  'token:created',
  'token:revoked',
  'leader:elected',
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

/** The state a `job:<state>` event says its job moved to; null for any other event. */
export function jobStateOfEvent(type: string): JobState | null {
  const s = type.startsWith('job:') ? type.slice(4) : '';
  return isJobState(s) ? s : null;
}
