import { sql, type Kysely, type Migration } from 'kysely';

/**
 * Shares of a GPU (issue 29): what each attempt holds of each of its GPUs, in thousandths (1000: the
 * whole GPU; every attempt before this migration held whole GPUs, or none), and the GPU memory a
 * share holds there, bytes (null: none bounded); and a reused stage's GPUs in thousandths. What is free on a GPU is 1000 less the thousandths
 * of the attempts that hold it, computed from these rows like every other allocation.
 */
export const migration0024GpuShares: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .alterTable('attempts')
      .addColumn('gpu_milli', 'integer', (c) =>
        c
          .notNull()
          .defaultTo(1000)
          .check(sql`gpu_milli >= 1 and gpu_milli <= 1000`),
      )
      .execute();
    await db.schema
      .alterTable('attempts')
      .addColumn('gpu_memory_bytes', 'bigint', (c) => c.check(sql`gpu_memory_bytes is null or gpu_memory_bytes >= 1`))
      .execute();
    // A reused stage's GPUs in thousandths (its source attempt's GPUs × what it held of each), so
    // that a rerun's GPU-hours saved count a share as its part; null on rows before: reused_gpus whole GPUs.
    await db.schema.alterTable('stages').addColumn('reused_gpu_milli', 'bigint').execute();
  },
};
