import { type Kysely, type Migration, sql } from 'kysely';

/**
 * Rerun from a failed stage (docs/rerun.md). Jobs link to the job they rerun; stages carry the
 * `reused` marker (the job whose attempt produced their outputs, its run time and GPUs) and when
 * the size budget released their outputs. Outputs become content-addressed blobs named by
 * manifests (`output_files`, one row per committed file per stage), so a rerun copies rows, not
 * bytes, and a blob lives while a manifest names it; `output_uploads` records what each attempt
 * uploaded, the only files its outcome may commit.
 *
 * Outputs committed before this version get manifest and blob rows whose key is
 * `legacy:<attemptId>/<path>`: the file stays where that version wrote it and is read from
 * there, so nothing is hashed or moved at upgrade.
 */
export function migration0014RerunOutputs(): Migration {
  return {
    async up(db: Kysely<any>) {
      await db.schema.alterTable('jobs').addColumn('rerun_of', 'text').execute();
      await db.schema.alterTable('jobs').addColumn('rerun_from', 'text').execute();
      await sql`create index jobs_rerun_of on jobs (rerun_of) where rerun_of is not null`.execute(db);
      await db.schema.alterTable('stages').addColumn('reused_from', 'text').execute();
      await db.schema.alterTable('stages').addColumn('reused_run_ms', 'bigint').execute();
      await db.schema.alterTable('stages').addColumn('reused_gpus', 'integer').execute();
      await db.schema.alterTable('stages').addColumn('outputs_released_at', 'bigint').execute();
      await db.schema
        .createTable('artifact_blobs')
        .addColumn('key', 'text', (c) => c.primaryKey())
        .addColumn('size', 'bigint', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        // Its upload, or when it lost its last reference: what "oldest unreferenced first" orders by.
        .addColumn('touched_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('artifact_blobs_touched').on('artifact_blobs').columns(['touched_at']).execute();
      await db.schema
        .createTable('output_files')
        .addColumn('stage_id', 'text', (c) => c.notNull().references('stages.id'))
        .addColumn('job_id', 'text', (c) => c.notNull())
        .addColumn('path', 'text', (c) => c.notNull())
        .addColumn('blob', 'text', (c) => c.notNull())
        .addColumn('size', 'bigint', (c) => c.notNull())
        // The attempt that produced the file (of another job, for a reused stage): what agents name it by.
        .addColumn('attempt_id', 'text', (c) => c.notNull())
        .addPrimaryKeyConstraint('output_files_pk', ['stage_id', 'path'])
        .execute();
      // A blob's references, counted where needed rather than kept in a counter that could drift.
      await db.schema.createIndex('output_files_blob').on('output_files').columns(['blob']).execute();
      await db.schema.createIndex('output_files_attempt').on('output_files').columns(['attempt_id', 'path']).execute();
      await db.schema.createIndex('output_files_job').on('output_files').columns(['job_id']).execute();
      await db.schema
        .createTable('output_uploads')
        .addColumn('attempt_id', 'text', (c) => c.notNull())
        .addColumn('path', 'text', (c) => c.notNull())
        .addColumn('blob', 'text', (c) => c.notNull())
        .addColumn('size', 'bigint', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addPrimaryKeyConstraint('output_uploads_pk', ['attempt_id', 'path'])
        .execute();
      await db.schema.createIndex('output_uploads_blob').on('output_uploads').columns(['blob']).execute();

      // Earlier versions' committed outputs: the stages' output attempts and the files they named.
      let after = '';
      for (;;) {
        const rows = await db
          .selectFrom('stages')
          .innerJoin('attempts', 'attempts.id', 'stages.output_attempt_id')
          .select([
            'stages.id as stage_id',
            'stages.job_id as job_id',
            'attempts.id as attempt_id',
            'attempts.outputs as outputs',
            'attempts.finished_at as finished_at',
          ])
          .where('stages.id', '>', after)
          .orderBy('stages.id')
          .limit(500)
          .execute();
        if (rows.length === 0) break;
        after = rows.at(-1)!.stage_id;
        const files: Record<string, unknown>[] = [];
        const blobs = new Map<string, Record<string, unknown>>();
        for (const r of rows) {
          const at = Number(r.finished_at ?? 0);
          for (const o of (r.outputs ? JSON.parse(r.outputs) : []) as { path: string; size: number }[]) {
            const key = `legacy:${r.attempt_id}/${o.path}`;
            files.push({ stage_id: r.stage_id, job_id: r.job_id, path: o.path, blob: key, size: o.size, attempt_id: r.attempt_id });
            blobs.set(key, { key, size: o.size, created_at: at, touched_at: at });
          }
        }
        // A few hundred rows a statement: far under either database's limit on bound parameters.
        for (let i = 0; i < files.length; i += 500)
          await db
            .insertInto('output_files')
            .values(files.slice(i, i + 500))
            .execute();
        const blobRows = [...blobs.values()];
        for (let i = 0; i < blobRows.length; i += 500)
          await db
            .insertInto('artifact_blobs')
            .values(blobRows.slice(i, i + 500))
            .execute();
      }
    },
  };
}
