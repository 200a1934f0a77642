import type { StageDefinition } from '../../domain/job-definition.js';
import type { MachineHealth } from '../../domain/machine-health.js';
import { newId } from '../../domain/ids.js';
import type { MachineGpu } from '../records.js';
import type { MachineView, Plan, QueuedStage, SchedulerSnapshot } from '../../scheduler/snapshot.js';
import type { PlanApplyResult } from '../store.js';
import { attemptsWithNames } from './job-verbs.js';
import { emptyUsage, machineUsage } from './machine-usage.js';
import { syncJobState } from './sync-job-state.js';
import type { Db, TxContext } from './tx-context.js';

export async function schedulerSnapshot(db: Db, p: { now: number; limitPerPool: number }): Promise<SchedulerSnapshot> {
  const machines = await db.selectFrom('machines').selectAll().orderBy('name').execute();
  // Every health, capacity or membership change writes the machine's updated_at.
  const clusterVersion = machines.reduce((v, m) => Math.max(v, Number(m.updated_at)), 0);
  const usage = await machineUsage(db);
  const views: MachineView[] = machines.map((m) => {
    const u = usage.get(m.id) ?? emptyUsage();
    const gpus = JSON.parse(m.gpus) as MachineGpu[];
    return {
      id: m.id,
      name: m.name,
      health: m.health as MachineHealth,
      region: m.region,
      labels: JSON.parse(m.labels),
      cpuMillisTotal: Number(m.cpu_millis),
      memoryBytesTotal: Number(m.memory_bytes),
      cpuMillisFree: Number(m.cpu_millis) - u.cpuMillis,
      memoryBytesFree: Number(m.memory_bytes) - u.memoryBytes,
      gpus: gpus.map((g) => ({ index: g.index, type: g.type, free: !u.gpuIndices.includes(g.index) })),
    };
  });
  // Queue reads go pool by pool through the (state, pool, priority, ready_since) index, so a
  // pass costs what the heads of the queues cost, not what the whole history of jobs costs.
  const pools = await db.selectFrom('stages').select('pool').distinct().where('state', '=', 'ready').execute();
  const queue: QueuedStage[] = [];
  for (const { pool } of pools) {
    const rows = await db
      .selectFrom('stages')
      .select(['id', 'job_id', 'name', 'pool', 'priority', 'ready_since', 'definition'])
      .where('state', '=', 'ready')
      .where('pool', '=', pool)
      .where((eb) => eb.or([eb('not_before', 'is', null), eb('not_before', '<=', p.now)]))
      .where((eb) => eb.or([eb('parked_at', 'is', null), eb('parked_at', '<', clusterVersion)]))
      .orderBy('priority', 'desc')
      .orderBy('ready_since', 'asc')
      .limit(p.limitPerPool)
      .execute();
    for (const r of rows) {
      const def = JSON.parse(r.definition) as StageDefinition;
      queue.push({
        stageId: r.id,
        jobId: r.job_id,
        stageName: r.name,
        pool: r.pool,
        priority: Number(r.priority),
        readySince: Number(r.ready_since ?? 0),
        resources: def.resources,
        placement: def.placement,
      });
    }
  }
  return { clusterVersion, machines: views, queue };
}

/**
 * Applies the scheduler's plan, re-checking every placement against the state as it is now
 * (Nomad's plan applier does the same): the stage must still be ready and the machine ready with
 * the room and the very GPU devices the plan named. The stage's fencing token grows by one and
 * becomes the new attempt's token.
 */
export async function planApply(tx: TxContext, p: { plan: Plan; leaseMs: number; clusterVersion?: number }): Promise<PlanApplyResult> {
  const skipped: PlanApplyResult['skipped'] = [];
  const appliedIds: string[] = [];
  const machineIds = [...new Set(p.plan.placements.map((x) => x.machineId))];
  const usage = await machineUsage(tx.db, machineIds);
  const machines = machineIds.length
    ? await tx.db.selectFrom('machines').selectAll().where('id', 'in', machineIds).execute()
    : [];
  const byId = new Map(machines.map((m) => [m.id, m]));
  const jobsTouched = new Set<string>();
  const wake = new Set<string>();

  // The plan's stages in one read; each is placed at most once, and its write below is still
  // guarded on the state and token read here.
  const stageIds = p.plan.placements.map((x) => x.stageId);
  const stages = new Map(
    (stageIds.length
      ? await tx.db.selectFrom('stages').select(['id', 'job_id', 'name', 'token', 'state', 'ready_since']).where('id', 'in', stageIds).execute()
      : []
    ).map((r) => [r.id, r]),
  );
  for (const pl of p.plan.placements) {
    const m = byId.get(pl.machineId);
    const u = usage.get(pl.machineId) ?? emptyUsage();
    if (!m || m.health !== 'ready') {
      skipped.push({ stageId: pl.stageId, why: 'machine no longer ready' });
      continue;
    }
    const gpus = JSON.parse(m.gpus) as MachineGpu[];
    const chosen = pl.gpuIndices.map((i) => gpus.find((g) => g.index === i));
    if (
      Number(m.cpu_millis) - u.cpuMillis < pl.cpuMillis ||
      Number(m.memory_bytes) - u.memoryBytes < pl.memoryBytes ||
      chosen.some((g) => !g) ||
      pl.gpuIndices.some((i) => u.gpuIndices.includes(i)) ||
      new Set(chosen.map((g) => g!.type)).size > 1
    ) {
      skipped.push({ stageId: pl.stageId, why: 'machine no longer has room' });
      continue;
    }
    const stage = stages.get(pl.stageId);
    if (!stage || stage.state !== 'ready') {
      skipped.push({ stageId: pl.stageId, why: 'stage no longer ready' });
      continue;
    }
    const token = Number(stage.token) + 1;
    const attemptId = newId('att', tx.now);
    const res = await tx.db
      .updateTable('stages')
      .set({ state: 'scheduled', token, current_attempt_id: attemptId, pending_reason: null, parked_at: null, updated_at: tx.now })
      .where('id', '=', stage.id)
      .where('state', '=', 'ready')
      .where('token', '=', token - 1)
      .executeTakeFirst();
    if (Number(res.numUpdatedRows) !== 1) {
      skipped.push({ stageId: pl.stageId, why: 'stage changed while placing' });
      continue;
    }
    const gpuType = chosen[0]?.type ?? null;
    await tx.db
      .insertInto('attempts')
      .values({
        id: attemptId,
        stage_id: stage.id,
        job_id: stage.job_id,
        stage_name: stage.name,
        number: token,
        token,
        machine_id: m.id,
        gpu_indices: JSON.stringify(pl.gpuIndices),
        gpu_type: gpuType,
        cpu_millis: pl.cpuMillis,
        memory_bytes: pl.memoryBytes,
        state: 'scheduled',
        exit_code: null,
        signal: null,
        reason: null,
        pid: null,
        outputs: null,
        // Until the agent acknowledges, the lease is the acknowledgement deadline's business.
        lease_expires_at: tx.now + p.leaseMs,
        scheduled_at: tx.now,
        started_at: null,
        finished_at: null,
        released_at: null,
        log_bytes: 0,
      })
      .execute();
    u.cpuMillis += pl.cpuMillis;
    u.memoryBytes += pl.memoryBytes;
    u.gpuIndices.push(...pl.gpuIndices);
    usage.set(m.id, u);
    appliedIds.push(attemptId);
    jobsTouched.add(stage.job_id);
    wake.add(m.id);
    const gpuText = pl.gpuIndices.length ? ` with ${gpuType} GPU(s) ${pl.gpuIndices.join(',')}` : '';
    await tx.event({
      type: 'attempt:scheduled',
      jobId: stage.job_id,
      stageName: stage.name,
      attemptId,
      machineId: m.id,
      message: `stage ${stage.name} attempt ${token} placed on ${m.name}${gpuText}`,
      data: { machine: m.name, gpus: pl.gpuIndices, waitedMs: tx.now - Number(stage.ready_since ?? tx.now) },
    });
  }
  for (const pend of p.plan.pending) {
    if (pend.unplaceable && p.clusterVersion !== undefined) {
      // Parked: out of the queue's head until the cluster changes (a machine joins or returns).
      await tx.db
        .updateTable('stages')
        .set({ pending_reason: pend.reason, parked_at: p.clusterVersion })
        .where('id', '=', pend.stageId)
        .where('state', '=', 'ready')
        .execute();
      continue;
    }
    await tx.db
      .updateTable('stages')
      .set({ pending_reason: pend.reason })
      .where('id', '=', pend.stageId)
      .where('state', '=', 'ready')
      .where((eb) => eb.or([eb('pending_reason', 'is', null), eb('pending_reason', '<>', pend.reason)]))
      .execute();
  }
  for (const jobId of jobsTouched) await syncJobState(tx, jobId);
  for (const machineId of wake) await tx.publish('machine:wake', { machineId });
  const rows = appliedIds.length ? await tx.db.selectFrom('attempts').selectAll().where('id', 'in', appliedIds).execute() : [];
  return { applied: await attemptsWithNames(tx.db, rows), skipped };
}
