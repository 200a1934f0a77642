import { type Kysely, type Migration, sql } from 'kysely';

/**
 * How an attempt ended, typed (issue 26): the advancer decides retries by this kind, never by the
 * reason's wording. The kinds are written out here as they were when this shipped (a later kind
 * is a later migration that widens the check), not read from the domain's list, which moves.
 * Rows that ended before it keep null: their kind was never recorded, only their text.
 */
export const migration0017AttemptEnd: Migration = {
  async up(db: Kysely<any>) {
    await sql`alter table attempts add column end_kind text check (end_kind in (
      'exited', 'signaled', 'timeout', 'spawn-failed', 'inputs-failed', 'outputs-failed', 'killed', 'oom-killed', 'lost', 'preempted'
    ))`.execute(db);
  },
};
