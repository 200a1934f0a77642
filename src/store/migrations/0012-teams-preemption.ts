import { createHash } from 'node:crypto';
import type { Kysely, Migration } from 'kysely';

/*
 * Frozen (docs/store-contract.md, "Migrations"): the shape function below is stageShape() as this
 * migration last shipped it (commit 245958f), with the pool and GPU-type rules and the default
 * team's name it used, copied as they were. (It first shipped in ed05f59 without the time limit
 * in the key: a database upgraded by that build keyed its open stages that had a time limit
 * without it. That is data, not schema, and those stages have long left their queues.)
 */
const DEFAULT_TEAM = 'default';

interface FrozenResources {
  cpuMillis: number;
  memoryBytes: number;
  gpu: { count: number; types: string[] } | null;
}
interface FrozenPlacement {
  region: string | null;
  labels: Record<string, string>;
  allowGpuMachines?: boolean;
}
interface FrozenOwner {
  team: string;
  preemptible: boolean;
  timeoutSeconds: number | null;
}

function poolOf(resources: FrozenResources): string {
  if (!resources.gpu || resources.gpu.count === 0) return 'cpu';
  return resources.gpu.types.length === 1 ? `gpu:${resources.gpu.types[0]}` : 'gpu:any';
}

function shapeAt0012(resources: FrozenResources, placement: FrozenPlacement, owner: FrozenOwner): string {
  const gpu = resources.gpu && resources.gpu.count > 0 ? resources.gpu : null;
  const types = gpu ? [...new Set(gpu.types.map((t) => t.trim().toLowerCase()))].sort() : [];
  const labels = Object.entries(placement.labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const parts: unknown[] = [poolOf(resources), resources.cpuMillis, resources.memoryBytes, gpu?.count ?? 0, types, placement.region, labels];
  if (placement.allowGpuMachines && !gpu) parts.push('gpu-machines');
  if (owner.team !== DEFAULT_TEAM || owner.preemptible) parts.push({ team: owner.team, preemptible: owner.preemptible });
  if (owner.timeoutSeconds) parts.push({ timeoutSeconds: owner.timeoutSeconds });
  const key = JSON.stringify(parts);
  return 'sh_' + createHash('sha256').update(key).digest('base64url').slice(0, 22);
}

/**
 * Teams get a quota and an update time; stages say whether they are preemptible and when they
 * were last preempted. A stage's shape now holds its team and preemptibility: open stages get
 * theirs again, so a team's stages form queues of their own (a time limit, which backfill reads,
 * is part of it too).
 */
export const migration0012TeamsPreemption: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable('teams').addColumn('quota', 'text').execute();
    await db.schema.alterTable('teams').addColumn('updated_at', 'bigint').execute();
    await db.schema
      .alterTable('stages')
      .addColumn('preemptible', 'integer', (c) => c.notNull().defaultTo(0))
      .execute();
    await db.schema.alterTable('stages').addColumn('preempted_at', 'bigint').execute();
    const open = await db
      .selectFrom('stages')
      .innerJoin('jobs', 'jobs.id', 'stages.job_id')
      .select(['stages.id', 'stages.definition', 'jobs.team'])
      .where('stages.state', 'in', ['pending', 'ready', 'scheduled', 'running'])
      .execute();
    for (const r of open) {
      const def = JSON.parse(r.definition) as { resources: FrozenResources; placement: FrozenPlacement; preemptible?: boolean; timeoutSeconds?: number | null };
      const preemptible = def.preemptible === true;
      await db
        .updateTable('stages')
        .set({
          shape: shapeAt0012(def.resources, def.placement, { team: r.team, preemptible, timeoutSeconds: def.timeoutSeconds ?? null }),
          preemptible: preemptible ? 1 : 0,
        })
        .where('id', '=', r.id)
        .execute();
    }
  },
};
