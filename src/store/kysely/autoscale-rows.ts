import type { AutoscaleRow, AutoscaleWait } from '../../autoscale/autoscale-row.js';
import { MachineLifecycle } from '../../autoscale/machine-lifecycle.js';
import type { StageDefinition } from '../../domain/job-definition.js';
import type { QueuedStage } from '../../scheduler/snapshot.js';
import type { AutoscaledMachinesTable } from '../schema.js';
import { QUEUE_STATE } from './scheduler-verbs.js';
import type { Db } from './tx-context.js';

/**
 * The autoscaler's rows as the store reads them (issue 30). `idleSince` and `attempts` are not
 * stored: they come from the attempts on the row's machine at each read, so scale-down's idle
 * clock survives a restart and never disagrees with what holds room there.
 */

/** What holds room on each machine now, and when the last attempt there let go of its room. */
async function attemptsOn(db: Db, machineIds: readonly string[]): Promise<Map<string, { held: number; lastRelease: number | null }>> {
  const out = new Map<string, { held: number; lastRelease: number | null }>();
  if (machineIds.length === 0) return out;
  const rows = await db
    .selectFrom('attempts')
    .select((eb) => [
      'machine_id',
      eb.fn.sum<number>(eb.case().when('released_at', 'is', null).then(1).else(0).end()).as('held'),
      eb.fn.max('released_at').as('last'),
    ])
    .where('machine_id', 'in', [...machineIds])
    .groupBy('machine_id')
    .execute();
  for (const r of rows) out.set(r.machine_id, { held: Number(r.held ?? 0), lastRelease: r.last === null ? null : Number(r.last) });
  return out;
}

/**
 * Rows with their computed fields, in the order given. Only rows not at their end (released and
 * stopped) are looked up in the attempts: a stopped machine is gone and holds nothing, and the
 * ended rows are one per machine a pool ever started, so binding all their machine ids grew without
 * bound and failed past the database's limit on bound values (SQLite's 32,766).
 */
export async function withAttempts(db: Db, rows: readonly AutoscaledMachinesTable[]): Promise<AutoscaleRow[]> {
  const live = (r: AutoscaledMachinesTable) => r.machine_id !== null && r.stopped_at === null;
  const on = await attemptsOn(
    db,
    rows.flatMap((r) => (live(r) ? [r.machine_id!] : [])),
  );
  return rows.map((r) => {
    const a = live(r) ? on.get(r.machine_id!) : undefined;
    const held = a?.held ?? 0;
    const joinedAt = r.joined_at === null ? null : Number(r.joined_at);
    // Idle since the later of its join and the last release there; not idle while anything holds
    // room; at its end, not idle: gone.
    const idleSince = joinedAt === null || held > 0 || r.stopped_at !== null ? null : Math.max(joinedAt, a?.lastRelease ?? 0);
    return {
      name: r.name,
      pool: r.pool,
      lifecycle: r.lifecycle,
      reason: r.reason,
      startedAt: Number(r.started_at),
      requestedAt: num(r.requested_at),
      providerId: r.provider_id,
      joinedAt,
      machineId: r.machine_id,
      drainingAt: num(r.draining_at),
      releasedAt: num(r.released_at),
      stoppedAt: num(r.stopped_at),
      idleSince,
      attempts: held,
      failReason: r.fail_reason,
      heldFor: JSON.parse(r.held_for) as string[],
      updatedAt: Number(r.updated_at),
    };
  });
}

const num = (v: number | null): number | null => (v === null ? null : Number(v));

/** One row, or null for an unknown name. */
export async function autoscaleRowOf(db: Db, name: string): Promise<AutoscaleRow | null> {
  const row = await db.selectFrom('autoscaled_machines').selectAll().where('name', '=', name).executeTakeFirst();
  return row ? (await withAttempts(db, [row]))[0]! : null;
}

export async function autoscaleRows(db: Db, p: { active?: boolean; pool?: string }): Promise<AutoscaleRow[]> {
  let q = db.selectFrom('autoscaled_machines').selectAll().orderBy('started_at').orderBy('name');
  // Only a released row is ever stopped, so "not stopped" is "not at the end" (and what the partial index holds).
  if (p.active) q = q.where('stopped_at', 'is', null);
  if (p.pool !== undefined) q = q.where('pool', '=', p.pool);
  return withAttempts(db, await q.execute());
}

/**
 * Each joined machine's hold with those of its stages still ready to place now, in the order the
 * queue reads them (priority, the job's submission, the job, readiness); the others are left out.
 */
export async function autoscaleHeldStages(db: Db, p: { now: number }): Promise<{ name: string; machineId: string; stages: QueuedStage[] }[]> {
  const rows = await db
    .selectFrom('autoscaled_machines')
    .select(['name', 'machine_id', 'held_for'])
    .where('lifecycle', '=', MachineLifecycle.ready)
    .where('machine_id', 'is not', null)
    .where('held_for', '!=', '[]')
    .where('stopped_at', 'is', null)
    .orderBy('started_at')
    .orderBy('name')
    .execute();
  const out: { name: string; machineId: string; stages: QueuedStage[] }[] = [];
  for (const r of rows) {
    const ids = JSON.parse(r.held_for) as string[];
    const stages = ids.length
      ? await db
          .selectFrom('stages')
          .innerJoin('jobs', 'jobs.id', 'stages.job_id')
          .select([
            'stages.id',
            'stages.job_id',
            'stages.name',
            'stages.pool',
            'stages.priority',
            'stages.created_at',
            'stages.ready_since',
            'stages.definition',
            'jobs.team',
          ])
          .where('stages.id', 'in', ids)
          .where('stages.state', '=', QUEUE_STATE)
          .where((eb) => eb.or([eb('stages.not_before', 'is', null), eb('stages.not_before', '<=', p.now)]))
          .orderBy('stages.priority', 'desc')
          .orderBy('stages.created_at', 'asc')
          .orderBy('stages.job_id', 'asc')
          .orderBy('stages.ready_since', 'asc')
          .execute()
      : [];
    out.push({
      name: r.name,
      machineId: r.machine_id!,
      stages: stages.map((s) => {
        const def = JSON.parse(s.definition) as StageDefinition;
        return {
          stageId: s.id,
          jobId: s.job_id,
          stageName: s.name,
          pool: s.pool,
          priority: Number(s.priority),
          readySince: Number(s.ready_since ?? 0),
          submittedAt: Number(s.created_at),
          resources: def.resources,
          placement: def.placement,
          team: s.team,
          ...(def.preemptible ? { preemptible: true } : {}),
          ...(def.timeoutSeconds ? { timeoutSeconds: def.timeoutSeconds } : {}),
        };
      }),
    });
  }
  return out;
}

export async function autoscaleWaitOf(db: Db, p: { stageId: string }): Promise<AutoscaleWait | null> {
  const r = await db.selectFrom('autoscale_waits').selectAll().where('stage_id', '=', p.stageId).executeTakeFirst();
  if (!r) return null;
  // Only autoscaleWaitsPut writes this column, from the same union.
  return { stageId: r.stage_id, kind: r.kind as AutoscaleWait['kind'], reason: r.reason, pool: r.pool, at: Number(r.at) };
}
