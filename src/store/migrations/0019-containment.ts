import type { Kysely, Migration } from 'kysely';

/**
 * Containment (issue 27, docs/containment.md): what each machine's agent enforces on its attempts,
 * as it reported at registration (a JSON document; null for machines whose agent did not report,
 * older agents and machines registered before), and what each attempt used, measured from its
 * cgroup when it ended: the peak of its memory in bytes and its CPU time in seconds (null where
 * the agent had no cgroup to read them from, and for attempts that ended before).
 */
export const migration0019Containment: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable('machines').addColumn('containment', 'text').execute();
    await db.schema.alterTable('attempts').addColumn('memory_peak_bytes', 'bigint').execute();
    // Double, not real: PostgreSQL's real is 4 bytes, which rounds a long run's seconds.
    await db.schema.alterTable('attempts').addColumn('cpu_seconds', 'double precision').execute();
  },
};
