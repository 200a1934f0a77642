import type { ApiApp } from './api-app.js';
import { Type } from 'typebox';
import { Value } from 'typebox/value';
import type { RerunPlan } from '../advancer/rerun-plan.js';
import { AlreadySubmitted, ConflictError, NotFoundError } from '../domain/errors.js';
import { ValidationError } from '../spec/validation-error.js';
import { SPEC_BOUNDS } from '../spec/spec-limits.js';
import type { JobDefinition } from '../domain/job-definition.js';
import { JobSpecSchema, parseJobSpec } from '../domain/job-spec.js';
import { schemaIssues } from '../spec/schema-issues.js';
import { hasSecrets, redactSpec } from '../domain/secret-env.js';
import { ArtifactStore } from '../artifacts/artifact-store.js';
import type { ApiContext } from './api-context.js';
import { auditBy } from './auth/audit-entry.js';
import { ownJob } from './auth/job-visibility.js';
import { who } from './auth/principal.js';
import { ErrorBody } from './contract/job-view.js';
import { RerunRequest, RerunResult } from './contract/rerun.js';
import { idempotencyOf } from './idempotency.js';
import { JobParams } from './job-params.js';
import { jobView, rerunPlanOfJob, rerunPlanView } from './views.js';

/**
 * The request as the OpenAPI document shows it: its spec with the job spec's own schema. The
 * handler checks the envelope (RerunRequest, whose spec is any value) and parseJobSpec the spec,
 * each wording its problems for people.
 */
const RerunBody = Type.Object(
  {
    ...RerunRequest.properties,
    spec: Type.Optional({ ...JobSpecSchema, description: (RerunRequest.properties.spec as { description?: string }).description }),
  },
  { additionalProperties: false },
);

/** `POST /v1/jobs/{id}/rerun` (docs/rerun.md). */
export function rerunRoutes(app: ApiApp, ctx: ApiContext): void {
  const { store, clock } = ctx;
  app.post(
    '/v1/jobs/:id/rerun',
    {
      config: { access: 'user', audit: 'job.rerun', specBounds: SPEC_BOUNDS },
      schema: {
        summary: 'Rerun a job from a stage: a new job that reuses the committed outputs of every stage it does not run again',
        description:
          'The stages in `from` (default: every failed, skipped or canceled one) and everything downstream run again; every other stage is reused: ' +
          "`succeeded` from the start with the original's committed outputs (by reference: nothing is copied), and no attempt of it runs. " +
          "`spec` may change the run settings (command, env, resources, …) of the stages that run again and the job's priority and labels; a change to a reused stage, " +
          "to the DAG's shape, or to the job's name or team is refused (400, naming the stage and field). Refused (409): a job not ended without `cancelRunning`, " +
          'a stage to reuse that did not succeed or whose outputs are gone. Every refusal writes nothing. `dryRun`: the plan only. ' +
          'Answers the plan (reused stages with the GPU-hours saved, stages that run) and the new job (201); with an `Idempotency-Key` seen before, the same (200).',
        tags: ['jobs'],
        params: JobParams,
        body: RerunBody,
        response: { 200: RerunResult, 201: RerunResult, 400: ErrorBody, 404: ErrorBody, 409: ErrorBody, 413: ErrorBody, 415: ErrorBody },
      },
      // Checked below (the envelope) and by parseJobSpec (the spec), for issues worded for people.
      validatorCompiler: () => () => true,
    },
    async (req, reply) => {
      const { id } = req.params;
      await ownJob(store, req.principal, id);
      const raw = req.body ?? {};
      if (typeof raw !== 'object' || Array.isArray(raw))
        throw new ValidationError([{ path: '', message: 'the body must be a JSON object: {from?, spec?, cancelRunning?, dryRun?}' }]);
      if (!Value.Check(RerunRequest, raw)) throw new ValidationError(schemaIssues(RerunRequest, raw));
      const body = raw;
      const team = (await store.jobTeam({ jobId: id }))!;
      const definition = body.spec === undefined ? undefined : specOf(body.spec, team);
      const common = {
        jobId: id,
        ...(body.from ? { from: body.from } : {}),
        ...(definition ? { definition, source: JSON.stringify(hasSecrets(definition) ? redactSpec(body.spec) : body.spec) } : {}),
        cancelRunning: body.cancelRunning === true,
        cancelReason: `canceled by ${who(req.principal)} to be rerun`,
      };
      // The plan first, writing nothing, so that the files it would reuse are checked on disk
      // before anything is written; the rerun then plans again in its own transaction.
      const dry = await store.jobRerun({ ...common, dryRun: true, now: clock.now() });
      if (!dry) throw new NotFoundError('job', id);
      await checkFilesPresent(ctx, dry.plan);
      if (body.dryRun) return reply.status(200).send({ dryRun: true, plan: rerunPlanView(dry.plan, false), job: null });
      try {
        // The job is part of the request: the same key and body for another job is another request (409).
        const idempotency = idempotencyOf(req, `${id}\n${JSON.stringify(raw)}`);
        const r = await store.jobRerun({ ...common, now: clock.now(), idempotency, audit: auditBy(req, 'job.rerun') });
        if (!r?.job) throw new NotFoundError('job', id);
        req.log.info(
          { jobId: id, rerun: r.job.id, reused: r.plan.reused.map((x) => x.stage), runs: r.plan.rerun.map((x) => x.stage), canceled: r.canceled },
          'job rerun',
        );
        return reply.status(201).send({ dryRun: false, plan: rerunPlanView(r.plan, r.canceled), job: jobView(r.job) });
      } catch (err) {
        if (!(err instanceof AlreadySubmitted)) throw err;
        // A retry of a rerun that was made: the same job, not a second one.
        const made = await store.jobGet({ jobId: err.jobIds[0]! });
        if (!made) throw new ConflictError(`Idempotency-Key "${err.key}" was used for job ${err.jobIds[0]}, which no longer exists (deleted after retention)`);
        return reply.status(200).send({ dryRun: false, plan: rerunPlanOfJob(made), job: jobView(made) });
      }
    },
  );
}

/**
 * The rerun's spec, validated as a submit's (paths under /spec). One that names no team is the
 * original's team's, as a team token's submit is; one that names another is refused by the plan.
 */
function specOf(spec: unknown, team: string): JobDefinition {
  let d: JobDefinition;
  try {
    d = parseJobSpec(spec);
  } catch (err) {
    if (err instanceof ValidationError) throw new ValidationError(err.issues.map((i) => ({ path: `/spec${i.path}`, message: i.message })));
    throw err;
  }
  const named = typeof spec === 'object' && spec !== null && 'team' in spec;
  return named ? d : { ...d, team };
}

/** Every file the plan would reuse is in the artifact store with its size; else refused, naming the stage and file. */
async function checkFilesPresent(ctx: ApiContext, plan: RerunPlan): Promise<void> {
  const gone: string[] = [];
  for (const r of plan.reused) {
    const lost = [];
    for (const f of r.files)
      if (!(await ctx.artifacts.present(f.blob, f.size)))
        lost.push(`${f.path} (${ArtifactStore.digestOf(f.blob) ? f.blob : 'stored before content addressing'})`);
    if (lost.length)
      gone.push(
        `stage ${r.stage}'s committed outputs in job ${r.fromJob} are gone from the artifact store: ${lost.join(', ')} missing, so it cannot be reused: add it to the stages to run again (--from ${r.stage})`,
      );
  }
  if (gone.length) throw new ConflictError(gone.join('; '));
}
