import { NotFoundError } from '../domain/errors.js';
import { explainPlacement } from '../scheduler/explain-placement.js';
import { stageNeed } from '../scheduler/checks.js';
import { gangNeedOf, gangPendingReasonNow } from '../scheduler/gang-placer.js';
import type { AttemptRecord } from '../store/records.js';
import type { ApiApp } from './api-app.js';
import type { ApiContext } from './api-context.js';
import type { Principal } from './auth/principal.js';
import { ownJob as ownJobOf } from './auth/job-visibility.js';
import { ErrorBody, StageExplanation } from './contract/job-view.js';
import { StageParams } from './job-params.js';
import { quotaReasons } from './quota-reasons.js';
import { stageAutoscale } from './stage-autoscale.js';

const errors = { 400: ErrorBody, 404: ErrorBody };

/** `GET /v1/jobs/{id}/stages/{stage}/explain`: why a stage is where it is (docs/scheduling.md). */
export function stageExplainRoute(app: ApiApp, ctx: ApiContext): void {
  const { store, clock } = ctx;
  const ownJob = (p: Principal | undefined, id: string) => ownJobOf(store, p, id);
  app.get(
    '/v1/jobs/:id/stages/:stage/explain',
    {
      config: { access: 'user' },
      schema: {
        summary:
          'Why a stage is not running: the binding reason, machines left after each constraint, its place in the queue, and what change would let it run',
        tags: ['jobs'],
        params: StageParams,
        response: { 200: StageExplanation, ...errors },
      },
    },
    async (req) => {
      const { id, stage } = req.params;
      await ownJob(req.principal, id);
      const job = await store.jobGet({ jobId: id });
      const s = job?.stages.find((x) => x.name === stage);
      if (!job || !s) throw new NotFoundError('stage', `${id}/${stage}`);
      const now = clock.now();
      const waitsFor = s.definition.needs
        .map((n) => job.stages.find((x) => x.name === n)!)
        .filter((u) => u.state !== 'succeeded')
        .map((u) => ({ stage: u.name, state: u.state }));
      const { machines } = await store.clusterView();
      const fit = explainPlacement(stageNeed(s.definition), machines);
      // A gang's reason is what set of machines it lacks (docs/gangs.md); the funnel stays one member's.
      const gang = gangNeedOf(s.definition);
      // A gang the planner has room for now may still be skipped when applied (its rank 0's gang
      // ports all taken): the store kept that reason on the stage, and it binds until it is placed.
      const fitReason = gang ? (gangPendingReasonNow(gang, machines) ?? s.pendingReason) : fit.reason;
      const quota = s.state === 'ready' ? ((await quotaReasons(store, job.team, [s], machines)).get(s.id) ?? null) : null;
      const current = s.attempts.find((a) => a.id === s.currentAttemptId);
      const notBefore = s.notBefore;
      const backingOff = notBefore !== null && notBefore > now;
      const autoscale = s.state === 'ready' && !backingOff ? await stageAutoscale(store, ctx.config.pools, s.id, now) : null;
      // A machine started for it is what it waits for: that binds, not the cluster as it is now
      // (the funnel still shows that). The autoscaler's reason for starting none is said beside.
      const held = autoscale?.kind === 'held' ? autoscale.message : null;
      const reason =
        s.state === 'ready'
          ? backingOff
            ? (s.pendingReason ?? `backing off until ${new Date(notBefore).toISOString()}`)
            : (held ?? quota ?? fitReason)
          : s.state === 'pending'
            ? `waits for ${waitsFor.map((u) => `${u.stage} (${u.state})`).join(', ') || 'its upstream stages'}`
            : s.state === 'scheduled' || s.state === 'running'
              ? `${s.state} on ${placedOn(s.attempts, current)} (attempt ${current?.number ?? '?'})`
              : `${s.state}${s.endReason ? `: ${s.endReason}` : ''}`;
      const open = s.state === 'ready' || s.state === 'pending';
      return {
        jobId: id,
        stage,
        state: s.state,
        pool: s.pool,
        reason,
        quota,
        waitsFor,
        queue: s.state === 'ready' ? await store.stageQueuePosition({ stageId: s.id }) : null,
        registered: fit.registered,
        funnel: open ? fit.funnel : [],
        // One member's changes would say "1 machine could run it": nothing of a gang of N.
        suggestions: s.state === 'ready' && !gang ? fit.suggestions : [],
        ...(s.state === 'ready' ? { autoscale } : {}),
        ...(gang ? { gang: { size: gang.size, sameLabel: gang.sameLabel } } : {}),
      };
    },
  );
}

/** Where a placed stage runs: its machine, or a gang's members' ("g1, g2, g3", rank 0 first). */
function placedOn(attempts: readonly AttemptRecord[], current: AttemptRecord | undefined): string {
  if (!current) return 'a machine';
  if (!current.gang) return current.machineName;
  const members = attempts.filter((a) => a.gang?.id === current.gang!.id).sort((a, b) => a.gang!.rank - b.gang!.rank);
  return `${members.map((a) => a.machineName).join(', ')} (gang of ${current.gang.size})`;
}
