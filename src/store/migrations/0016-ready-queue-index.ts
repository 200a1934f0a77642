import { type Kysely, type Migration, sql } from 'kysely';

/**
 * The queue index holds the queue only. stages_state_shape keyed every stage by its state, so each
 * of a stage's four or five state changes moved its entry, and the index held every stage that
 * ever ran: 7 of the 36 pages an agent's report wrote (docs/throughput.md). Its readers all ask
 * for ready stages; with `where state = 'ready'` an entry is written when a stage becomes ready
 * and removed when it is placed, and a running or ended stage costs the index nothing. Its readers
 * must say `state = 'ready'` in the SQL text (QUEUE_STATE in scheduler-verbs.ts), not as a bound
 * value: only then may a planner use a partial index.
 *
 * The drop is `if exists` since 0018 was written: a database 0003 upgraded at afdf4e3 has
 * stages_ready_shape in its place (see 0003-stage-shapes.ts), and the plain drop failed there.
 * On every other database the effect is what it always was.
 */
export const migration0016ReadyQueueIndex: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.dropIndex('stages_state_shape').ifExists().execute();
    await sql`create index stages_ready on stages (shape, priority desc, created_at, job_id, ready_since) where state = 'ready'`.execute(db);
  },
};
