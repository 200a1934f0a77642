import { type Kysely, type Migration } from 'kysely';

/**
 * Output limits (docs/security.md, "Output limits"): an upload, when the server bounds each team's
 * stored outputs, sums the blobs its team's manifests name, found through the team's jobs. Without
 * an index on the jobs' team that is a read of every job there is, on every upload.
 */
export const migration0021OutputLimits: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.createIndex('jobs_team').on('jobs').columns(['team']).execute();
  },
};
