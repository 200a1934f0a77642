import { planRerun, rerunStageState, type RerunSource, type StageProvenance } from '../../advancer/rerun-plan.js';
import { newId } from '../../domain/ids.js';
import { GPU_MILLI_WHOLE } from '../../domain/resources.js';
import type { JobDefinition } from '../../domain/job-definition.js';
import { isJobTerminal, type JobState } from '../../domain/job-state.js';
import type { RerunParams, RerunResult } from '../store.js';
import type { Db, Trx, TxContext } from './tx-context.js';
import { jobCancel, jobGet } from './job-verbs.js';
import { idempotencyCheck, idempotencyRecord, insertRows, jobRow, stageRows } from './submit-verbs.js';
import { syncJobState } from './sync-job-state.js';
import { reusedGpus } from './row-mappers.js';

/** The job to rerun as the planner sees it: its stages, and where each succeeded one's outputs come from. */
async function rerunSource(db: Db | Trx, job: { id: string; state: string; definition: string }): Promise<RerunSource> {
  const stages = await db.selectFrom('stages').selectAll().where('job_id', '=', job.id).orderBy('position').execute();
  const committed = stages.flatMap((s) => (s.output_attempt_id && !s.reused_from ? [s.output_attempt_id] : []));
  const attempts = committed.length
    ? await db
        .selectFrom('attempts')
        .select(['id', 'started_at', 'finished_at', 'scheduled_at', 'gpu_indices', 'gpu_milli'])
        .where('id', 'in', committed)
        .execute()
    : [];
  const byId = new Map(attempts.map((a) => [a.id, a]));
  const files = stages.some((s) => s.output_attempt_id !== null)
    ? await db.selectFrom('output_files').select(['stage_id', 'path', 'blob', 'size']).where('job_id', '=', job.id).orderBy('path').execute()
    : [];
  const provenance = (s: (typeof stages)[number]): StageProvenance | null => {
    if (s.state !== 'succeeded' || s.outputs_released_at !== null) return null;
    const mine = files.filter((f) => f.stage_id === s.id).map((f) => ({ path: f.path, blob: f.blob, size: Number(f.size) }));
    // Reused here already: its source's run travels with it.
    if (s.reused_from) return { fromJob: s.reused_from, attemptId: s.output_attempt_id, runMs: Number(s.reused_run_ms ?? 0), gpus: reusedGpus(s), files: mine };
    const a = s.output_attempt_id ? byId.get(s.output_attempt_id) : undefined;
    const runMs = a ? Math.max(0, Number(a.finished_at ?? 0) - Number(a.started_at ?? a.scheduled_at)) : 0;
    // GPUs as an amount: a share counts its part (issue 29), so GPU-hours saved do too.
    const gpus = a ? ((JSON.parse(a.gpu_indices) as number[]).length * Number(a.gpu_milli)) / GPU_MILLI_WHOLE : 0;
    return { fromJob: job.id, attemptId: s.output_attempt_id, runMs, gpus, files: mine };
  };
  return {
    jobId: job.id,
    state: job.state as JobState,
    definition: JSON.parse(job.definition) as JobDefinition,
    stages: stages.map((s) => ({
      name: s.name,
      needs: (JSON.parse(s.definition) as { needs: string[] }).needs,
      state: s.state,
      outputs: provenance(s),
      outputsReleasedAt: s.outputs_released_at === null ? null : Number(s.outputs_released_at),
    })),
  };
}

/**
 * A rerun (docs/rerun.md), in one transaction: (cancel the job first, with cancelRunning,) plan
 * from what is read here, and make the new job: its reused stages `succeeded` with the original's
 * manifests copied (rows, not bytes), the rest ready or pending. Every refusal throws before
 * anything is written, and a cancel made first is undone with it. Null: no such job.
 */
export async function jobRerun(tx: TxContext, p: RerunParams): Promise<RerunResult | null> {
  if (p.idempotency && !p.dryRun) await idempotencyCheck(tx, p.idempotency);
  const original = await tx.db.selectFrom('jobs').select(['id', 'state', 'definition', 'source']).where('id', '=', p.jobId).executeTakeFirst();
  if (!original) return null;
  const opts = { from: p.from, cancelRunning: p.cancelRunning, next: p.definition };
  // A dry run plans on what is there (the planner treats a running job's stages as canceled).
  if (p.dryRun) return { plan: planRerun(await rerunSource(tx.db, original), opts), job: null, canceled: false };
  // Every refusal is found before the cancel, so that a refused rerun cancels nothing; the plan
  // is then made again from what the cancel left (the stages it canceled run again).
  let plan = planRerun(await rerunSource(tx.db, original), opts);
  let canceled = false;
  if (!isJobTerminal(original.state) && p.cancelRunning) {
    canceled = (await jobCancel(tx, { jobId: p.jobId, reason: p.cancelReason ?? 'canceled to be rerun' }))?.changed ?? false;
    const after = await tx.db.selectFrom('jobs').select(['id', 'state', 'definition']).where('id', '=', p.jobId).executeTakeFirstOrThrow();
    plan = planRerun(await rerunSource(tx.db, after), opts);
  }

  const jobId = newId('job', tx.now);
  const def = plan.definition;
  const reused = new Map(plan.reused.map((r) => [r.stage, r]));
  const reusedNames = new Set(reused.keys());
  const rows = stageRows(jobId, def, tx.now).map((r) => {
    const use = reused.get(r.name);
    if (!use) {
      const state = rerunStageState(def.stages[r.position]!.needs, reusedNames);
      return { ...r, state, ready_since: state === 'ready' ? tx.now : null, reused_from: null, reused_run_ms: null, reused_gpus: null, reused_gpu_milli: null };
    }
    return {
      ...r,
      state: 'succeeded' as const,
      ready_since: null,
      output_attempt_id: use.attemptId,
      finished_at: tx.now,
      reused_from: use.fromJob,
      reused_run_ms: use.runMs,
      // The devices (a share is one) and the exact amount in thousandths.
      reused_gpus: Math.ceil(use.gpus),
      reused_gpu_milli: Math.round(use.gpus * GPU_MILLI_WHOLE),
    };
  });
  await insertRows(tx, 'jobs', [
    {
      ...jobRow(jobId, def, p.definition ? (p.source ?? null) : original.source, 'submitted', tx.now),
      rerun_of: p.jobId,
      rerun_from: JSON.stringify(plan.from),
    },
  ]);
  await insertRows(tx, 'stages', rows);
  const stageIds = new Map(rows.map((r) => [r.name, r.id]));
  await insertRows(
    tx,
    'output_files',
    plan.reused.flatMap((r) =>
      r.files.map((f) => ({ stage_id: stageIds.get(r.stage)!, job_id: jobId, path: f.path, blob: f.blob, size: f.size, attempt_id: r.attemptId ?? '' })),
    ),
  );
  const runs = plan.rerun.map((r) => r.stage).join(', ');
  const kept = plan.reused.map((r) => r.stage).join(', ') || 'none';
  await tx.event({
    type: 'job:submitted',
    jobId,
    message: `job ${def.name} submitted by team ${def.team} with ${def.stages.length} stage(s): a rerun of job ${p.jobId} from ${plan.from.join(', ')}; reused ${kept}; runs ${runs}`,
    data: { stages: def.stages.length, priority: def.priority, rerunOf: p.jobId, from: plan.from },
  });
  for (const r of plan.reused) {
    await tx.event({
      type: 'stage:reused',
      jobId,
      stageName: r.stage,
      attemptId: r.attemptId,
      message: `stage ${r.stage} reused from job ${r.fromJob}${r.attemptId ? ` (attempt ${r.attemptId})` : ''}: its committed outputs (${r.files.length} file(s)), not run again`,
      data: { fromJob: r.fromJob, runMs: r.runMs, gpus: r.gpus },
    });
  }
  await tx.event({
    type: 'job:rerun',
    jobId: p.jobId,
    message: `rerun as job ${jobId} from ${plan.from.join(', ')}${canceled ? ' (canceled first)' : ''}: reused ${kept}; runs ${runs}`,
    data: { rerun: jobId, from: plan.from, gpuMsSaved: plan.gpuMsSaved },
  });
  for (const pool of new Set(rows.filter((r) => r.state === 'ready').map((r) => r.pool))) await tx.publish('pool:ready', { pool });
  await syncJobState(tx, jobId);
  if (p.idempotency) await idempotencyRecord(tx, p.idempotency, [jobId]);
  return { plan, job: await jobGet(tx.db, jobId, { fresh: true }), canceled };
}
