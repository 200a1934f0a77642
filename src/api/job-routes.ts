import { Type } from 'typebox';
import { jobStates } from '../domain/job-state.js';
import { NotFoundError } from '../domain/errors.js';
import { ArtifactStore } from '../artifacts/artifact-store.js';
import type { ApiApp } from './api-app.js';
import type { ApiContext } from './api-context.js';
import { ErrorBody, EventView, JobSummaryView, JobView } from './contract/job-view.js';
import { jobSummaryView, jobView } from './views.js';
import { withLivePendingReasons } from './live-pending-reasons.js';
import { eventView } from './event-routes.js';
import { eventVisible } from './event-visibility.js';
import { teamScope, who, type Principal } from './auth/principal.js';
import { ownJob as ownJobOf, visible } from './auth/job-visibility.js';
import { auditBy } from './auth/audit-entry.js';
import { JobParams } from './job-params.js';
import { jobSubmitRoutes } from './job-submit-routes.js';
import { stageExplainRoute } from './stage-explain-route.js';
import { stageLogRoute } from './stage-log-route.js';

/** A stage's output file: the wildcard is its path. No length limits: an unknown id or stage is a 404, as it always was. */
const OutputFileParams = Type.Object({
  id: Type.String(),
  stage: Type.String(),
  '*': Type.String({ description: "the file's path under the stage's outputs (the rest of the URL)" }),
});
const errors = { 400: ErrorBody, 404: ErrorBody };

/**
 * The routes of jobs: submitting (job-submit-routes.ts), listing, reading, canceling and deleting
 * them, their events and output files, and their stages' explanations and logs (one file each).
 */
export function jobRoutes(app: ApiApp, ctx: ApiContext): void {
  const { store, clock } = ctx;
  const ownJob = (p: Principal | undefined, id: string) => ownJobOf(store, p, id);

  jobSubmitRoutes(app, ctx);

  app.get(
    '/v1/jobs',
    {
      config: { access: 'user' },
      schema: {
        summary: "List jobs, newest first (a team token: its own team's only)",
        tags: ['jobs'],
        querystring: Type.Object({
          state: Type.Optional(Type.Union(jobStates.map((s) => Type.Literal(s)))),
          team: Type.Optional(Type.String()),
          name: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'jobs whose name holds this text, in any case' })),
          limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 50 })),
          before: Type.Optional(
            Type.String({ minLength: 1, maxLength: 200, description: 'the next page: jobs listed after this job id (the last of the previous page)' }),
          ),
        }),
        response: { 200: Type.Object({ jobs: Type.Array(JobSummaryView) }), 400: ErrorBody, 404: ErrorBody },
      },
    },
    async (req) => {
      const q = req.query;
      // A team token sees its own team's jobs only: asking for another team's finds none.
      const scope = teamScope(req.principal);
      if (scope !== null && q.team !== undefined && q.team !== scope) return { jobs: [] };
      if (q.before !== undefined) await ownJob(req.principal, q.before);
      const jobs = await store.jobList({
        state: q.state,
        team: scope ?? q.team,
        name: q.name,
        limit: q.limit ?? 50,
        ...(q.before !== undefined ? { before: q.before } : {}),
      });
      return { jobs: jobs.map(jobSummaryView) };
    },
  );

  app.get(
    '/v1/jobs/:id',
    {
      config: { access: 'user' },
      schema: { summary: 'A job with its stages and attempts', tags: ['jobs'], params: JobParams, response: { 200: JobView, ...errors } },
    },
    async (req) => {
      const { id } = req.params;
      const job = await store.jobGet({ jobId: id });
      if (!job || !visible(req.principal, job.team)) throw new NotFoundError('job', id);
      return jobView(await withLivePendingReasons(store, job, clock.now()));
    },
  );

  app.post(
    '/v1/jobs/:id/cancel',
    {
      config: { access: 'user', audit: 'job.cancel' },
      schema: {
        summary: 'Cancel a job',
        description: 'Cancel wins: no attempt starts after this returns; running ones are killed (TERM, grace, KILL).',
        tags: ['jobs'],
        params: JobParams,
        response: { 200: Type.Object({ changed: Type.Boolean(), job: JobView }), ...errors },
      },
    },
    async (req) => {
      const { id } = req.params;
      await ownJob(req.principal, id);
      const r = await store.jobCancel({ jobId: id, now: clock.now(), reason: `canceled by ${who(req.principal)}`, audit: auditBy(req, 'job.cancel') });
      req.log.info({ jobId: id, changed: r.changed }, 'job cancel');
      return { changed: r.changed, job: jobView(r.job) };
    },
  );

  app.get(
    '/v1/jobs/:id/events',
    {
      config: { access: 'user' },
      schema: {
        summary: "A job's events, oldest first",
        tags: ['jobs'],
        params: JobParams,
        querystring: Type.Object({ after: Type.Optional(Type.Integer({ minimum: 0 })), limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 5000 })) }),
        response: { 200: Type.Object({ events: Type.Array(EventView) }), ...errors },
      },
    },
    async (req) => {
      const { id } = req.params;
      const q = req.query;
      await ownJob(req.principal, id);
      const events = await store.eventsList({ jobId: id, afterSeq: q.after, limit: q.limit ?? 1000 });
      return { events: events.filter((e) => eventVisible(e, req.principal)).map(eventView) };
    },
  );

  stageExplainRoute(app, ctx);
  stageLogRoute(app, ctx);

  app.delete(
    '/v1/jobs/:id',
    {
      config: { access: 'user', audit: 'job.delete' },
      schema: {
        summary: 'Delete an ended job: its stages, attempts, events, logs and outputs, less the outputs another job reuses (409 for a job not ended)',
        tags: ['jobs'],
        params: JobParams,
        response: { 200: Type.Object({ deleted: Type.String(), attempts: Type.Integer() }), ...errors, 409: ErrorBody },
      },
    },
    async (req) => {
      const { id } = req.params;
      await ownJob(req.principal, id);
      const r = await store.jobDelete({ jobId: id, now: clock.now(), audit: auditBy(req, 'job.delete') });
      if (!r) throw new NotFoundError('job', id);
      // Rows first, then files: a crash between leaves files no row points at, never the reverse.
      // Blobs no other job names go at the next collection (docs/rerun.md); old directories now.
      for (const a of r.legacyDirs) await ctx.artifacts.removeLegacyDir(a);
      req.log.info({ jobId: id, attempts: r.attempts.length, by: req.principal?.tokenId }, 'job deleted');
      return { deleted: id, attempts: r.attempts.length };
    },
  );

  app.get(
    '/v1/jobs/:id/stages/:stage/outputs/*',
    { config: { access: 'user' }, schema: { summary: "Download one of a stage's committed output files", tags: ['jobs'], params: OutputFileParams } },
    async (req, reply) => {
      const { id, stage, '*': path } = req.params;
      const rel = ArtifactStore.checkPath(path);
      const job = await store.jobGet({ jobId: id });
      if (!job || !visible(req.principal, job.team)) throw new NotFoundError('job', id);
      const s = job.stages.find((x) => x.name === stage);
      if (!s) throw new NotFoundError('stage', `${id}/${stage}`);
      // The stage's manifest: its own commit or, for a stage a rerun reused, the original's files.
      const file = s.outputs?.find((o) => o.path === rel);
      if (!file) throw new NotFoundError('output', `${stage}/${rel}`);
      return reply.type('application/octet-stream').send(await ctx.artifacts.read(file.blob, `${stage}/${rel}`));
    },
  );
}
