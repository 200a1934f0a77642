import { createHash } from 'node:crypto';
import { type Kysely, type Migration, sql } from 'kysely';

/*
 * Frozen (docs/store-contract.md, "Migrations"): the shape function below is stageShape() as it
 * shipped with this migration (commit afdf4e3), with the pool and GPU-type rules it used, copied
 * as they were. Today's stageShape may key more (allowGpuMachines, the owner, the time limit); the
 * stages this back-fills were submitted before any of those existed, and 0012 keys open stages
 * again with what it knew.
 *
 * This migration was edited after it shipped: at afdf4e3 it made `stages_ready_shape (shape,
 * priority desc, ready_since) where state = 'ready'`; dc8891f replaced that with
 * `stages_state_shape (state, shape, priority desc, ready_since)`, and fd27aec added `created_at,
 * job_id` to it. 0016 drops stages_state_shape whichever columns it has (only if it is there) and
 * 0018 drops stages_ready_shape, so every database ends with the same indexes.
 */
interface FrozenResources {
  cpuMillis: number;
  memoryBytes: number;
  gpu: { count: number; types: string[] } | null;
}
interface FrozenPlacement {
  region: string | null;
  labels: Record<string, string>;
}

function poolOf(resources: FrozenResources): string {
  if (!resources.gpu || resources.gpu.count === 0) return 'cpu';
  return resources.gpu.types.length === 1 ? `gpu:${resources.gpu.types[0]}` : 'gpu:any';
}

function shapeAt0003(resources: FrozenResources, placement: FrozenPlacement): string {
  const gpu = resources.gpu && resources.gpu.count > 0 ? resources.gpu : null;
  const types = gpu ? [...new Set(gpu.types.map((t) => t.trim().toLowerCase()))].sort() : [];
  const labels = Object.entries(placement.labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const key = JSON.stringify([poolOf(resources), resources.cpuMillis, resources.memoryBytes, gpu?.count ?? 0, types, placement.region, labels]);
  return 'sh_' + createHash('sha256').update(key).digest('base64url').slice(0, 22);
}

/**
 * Queues by shape: the scheduler reads each shape's ready stages only as deep as free room allows,
 * and finds the shapes that have ready stages by walking an index, so a pass costs what it places,
 * not what waits. `parked_at` (0002) is no longer used: a shape no machine can run is never read.
 */
export const migration0003StageShapes: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable('stages').addColumn('shape', 'text').execute();
    // Stages that may still be queued get their shape; ended ones never need it.
    const open = await db.selectFrom('stages').select(['id', 'definition']).where('state', 'in', ['pending', 'ready', 'scheduled', 'running']).execute();
    for (const r of open) {
      const def = JSON.parse(r.definition) as { resources: FrozenResources; placement: FrozenPlacement };
      await db
        .updateTable('stages')
        .set({ shape: shapeAt0003(def.resources, def.placement) })
        .where('id', '=', r.id)
        .execute();
    }
    // State first, then shape: `min(shape) … where state = 'ready' and shape > ?` is one seek in
    // it (a partial index `where state = 'ready'` was not chosen for that by SQLite's planner),
    // and a shape's queue is read in order from it.
    await sql`create index stages_state_shape on stages (state, shape, priority desc, created_at, job_id, ready_since)`.execute(db);
  },
};
