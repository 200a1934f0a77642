import type { Plan } from '../../scheduler/snapshot.js';
import { placementMembers } from '../../scheduler/placement-members.js';

/**
 * How many places one placing transaction of the loop's takes (PostgreSQL): a placement is one, a
 * gang's placement one for each member. A
 * SERIALIZABLE transaction that reads more rows of a relation than PostgreSQL keeps locks for
 * (`max_pred_locks_per_relation`, 32 at the defaults; `max_pred_locks_per_page`, 2) holds a lock on
 * the whole relation instead, and then every report that writes an attempt or a stage beside it is
 * a dependency: the loop's plan of hundreds of placements was refused 41 of 48 times in a mass
 * loss (docs/failure-detection.md, "Branch `placing`"). Sixteen places, their machines, stages and
 * the attempts they hold stay under those limits, so a chunk keeps row locks (src/store/postgres/
 * placing-chunks.test.ts reads pg_locks for it).
 */
export const PLACES_PER_CHUNK = 16;

/**
 * A plan cut into plans applied one after the other, each in its own transaction: the placements
 * in plan order, at most `size` members a chunk, a gang never split (one larger than `size` is a
 * chunk of its own). The preemptions go with the last chunk, as they went at the end of the whole
 * plan. `pending` and the reservations are the planner's account, not written by planApply: they
 * stay with the first chunk so that nothing is dropped from the plan a caller passes on.
 *
 * Each chunk is re-checked against the rows as they are when it runs, so one that follows another
 * sees the room the other took; the plan's quota and fair-share decisions were made from the
 * pass's read-only snapshot before any chunk (planApply reads no team), as they were for the whole.
 */
export function planChunks(plan: Plan, size = PLACES_PER_CHUNK): Plan[] {
  const chunks: Plan[] = [];
  let current: Plan['placements'] = [];
  let members = 0;
  for (const pl of plan.placements) {
    const n = placementMembers(pl).length;
    if (current.length && members + n > size) {
      chunks.push({ placements: current, pending: [] });
      current = [];
      members = 0;
    }
    current.push(pl);
    members += n;
  }
  if (current.length || chunks.length === 0) chunks.push({ placements: current, pending: [] });
  const first = chunks[0]!;
  chunks[0] = { ...first, pending: plan.pending, ...(plan.reservations ? { reservations: plan.reservations } : {}) };
  if (plan.preemptions?.length) chunks[chunks.length - 1] = { ...chunks[chunks.length - 1]!, preemptions: plan.preemptions };
  return chunks;
}
