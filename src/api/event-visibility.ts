import type { EventRecord } from '../store/records.js';
import { teamScope, type Principal } from './auth/principal.js';
import { EVENT_TYPES, type EventType } from './contract/event-types.js';

/**
 * Who may see an event, by its type: what the API's other routes show the same token
 * (docs/security.md, "Events"):
 * - `job`: a job's, its stages' and attempts' changes: that job's team and admins, as the job
 *   itself (`GET /v1/jobs/{id}`; another team's job is 404);
 * - `users`: machines' and teams' changes: every person's token, as `GET /v1/machines` and
 *   `GET /v1/teams` show them their health, scheduling, weights and quotas (and the dashboard
 *   refreshes those pages on them);
 * - `admins`: tokens made and revoked (`GET /v1/tokens` is admin only) and the servers' leadership.
 */
type EventAudience = 'job' | 'users' | 'admins';

/**
 * Every type named, no default: a new event type does not compile (nor lint) until it is given its
 * audience here, so none can reach team tokens by being forgotten.
 */
function eventAudience(type: EventType): EventAudience {
  switch (type) {
    case 'job:submitted':
    case 'job:queued':
    case 'job:scheduled':
    case 'job:running':
    case 'job:succeeded':
    case 'job:failed':
    case 'job:canceled':
    case 'job:cancel-requested':
    case 'job:rerun':
    case 'stage:pending':
    case 'stage:ready':
    case 'stage:scheduled':
    case 'stage:running':
    case 'stage:succeeded':
    case 'stage:failed':
    case 'stage:canceled':
    case 'stage:skipped':
    case 'stage:reused':
    case 'stage:outputs-released':
    case 'attempt:scheduled':
    case 'attempt:running':
    case 'attempt:succeeded':
    case 'attempt:failed':
    case 'attempt:lost':
    case 'attempt:preempted':
    case 'attempt:canceled':
    case 'attempt:log-cut':
      return 'job';
    case 'machine:ready':
    case 'machine:suspect':
    case 'machine:lost':
    case 'machine:registered':
    case 'machine:cordoned':
    case 'machine:uncordoned':
    case 'machine:draining':
    case 'machine:removed':
    // Machines coming and going, as `gantry machines` shows every person.
    case 'autoscale:start':
    case 'autoscale:requested':
    case 'autoscale:joined':
    case 'autoscale:hold':
    case 'autoscale:drain':
    case 'autoscale:keep':
    case 'autoscale:release':
    case 'autoscale:fail':
    case 'autoscale:stopped':
    case 'team:created':
    case 'team:changed':
      return 'users';
    case 'token:created':
    case 'token:revoked':
    case 'leader:elected':
      return 'admins';
  }
}

const known = new Set<string>(EVENT_TYPES);
function isEventType(type: string): type is EventType {
  return known.has(type);
}

/**
 * Whether this principal may see this event: the one filter of `GET /v1/events` (streamed) and
 * `GET /v1/jobs/{id}/events` (a list). An admin sees every event. A team token sees `users`
 * events, and `job` events of its own team's jobs: the store's query already holds those to its
 * team (eventsList's `team`, or the job route's ownJob), so here a job's event must at least name
 * a job. A type the contract does not list is nobody's but admins' (closed, not open).
 */
export function eventVisible(e: EventRecord, p: Principal | undefined): boolean {
  const scope = teamScope(p);
  if (p?.kind === 'admin') return true;
  if (scope === null || !isEventType(e.type)) return false;
  switch (eventAudience(e.type)) {
    case 'job':
      return e.jobId !== null;
    case 'users':
      return true;
    case 'admins':
      return false;
  }
}
