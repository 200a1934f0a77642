import { Readable } from 'node:stream';
import type { ApiApp } from './api-app.js';
import { Type } from 'typebox';
import { jobStates } from '../domain/job-state.js';
import { AlreadySubmitted, ConflictError, NotFoundError } from '../domain/errors.js';
import { JobSpecSchema, parseJobSpec } from '../domain/job-spec.js';
import { MAX_BATCH_STAGES, parseJobBatch } from '../domain/job-batch.js';
import { parseJobBatchText, parseJobSpecText } from '../spec/job-spec-text.js';
import { MAX_BATCH_BYTES, MAX_BATCH_JOBS } from '../spec/spec-limits.js';
import { ValidationError } from '../spec/validation-error.js';
import { ArtifactStore } from '../artifacts/artifact-store.js';
import type { ApiContext } from './api-context.js';
import { JobBatchResult } from './contract/job-batch.js';
import { ErrorBody, EventView, JobSummaryView, JobView, StageExplanation, type SubmitWarning } from './contract/job-view.js';
import { explainPlacement } from '../scheduler/explain-placement.js';
import { neverPlaceable } from '../scheduler/never-placeable.js';
import { stageNeed } from '../scheduler/checks.js';
import { jobSummaryView, jobView } from './views.js';
import { quotaReasons } from './quota-reasons.js';
import { withLivePendingReasons } from './live-pending-reasons.js';
import { idempotencyOf } from './idempotency.js';
import { logChunkView, streamLog } from './log-stream.js';
import { eventView } from './event-routes.js';
import { teamScope, who, type Principal } from './auth/principal.js';
import { ownJob as ownJobOf, visible } from './auth/job-visibility.js';
import { auditBy } from './auth/audit-entry.js';
import type { JobDefinition } from '../domain/job-definition.js';
import { ForbiddenError } from '../domain/errors.js';
import { hasSecrets, redactSpec } from '../domain/secret-env.js';

const JobParams = Type.Object({ id: Type.String({ maxLength: 100 }) });
const StageParams = Type.Object({ id: Type.String({ maxLength: 100 }), stage: Type.String({ maxLength: 200 }) });
/** A stage's output file: the wildcard is its path. No length limits: an unknown id or stage is a 404, as it always was. */
const OutputFileParams = Type.Object({ id: Type.String(), stage: Type.String(), '*': Type.String() });
const errors = { 400: ErrorBody, 404: ErrorBody };
/**
 * The submit routes' query. Not validated (their validator accepts anything, for the YAML bodies'
 * sake): a value other than `true` or `1`, a repeated one included, reads as not strict.
 */
const SubmitQuery = Type.Object({
  strict: Type.Optional(Type.String({ description: 'true or 1: a stage no registered machine could ever run refuses the submit (400) instead of a warning' })),
});

/** `?strict=true` (or 1): a stage no registered machine could ever run refuses the submit instead of a warning. */
function strictOf(query: { strict?: string }): boolean {
  return query.strict === 'true' || query.strict === '1';
}

export function jobRoutes(app: ApiApp, ctx: ApiContext): void {
  const { store, clock } = ctx;
  /**
   * The stages of these jobs that no registered machine could ever run, per job (docs/scheduling.md,
   * "Never placeable"). Strict: refused, as a bad spec is, naming each such stage.
   */
  const placementWarnings = async (definitions: readonly JobDefinition[], strict: boolean, prefix: (i: number) => string): Promise<SubmitWarning[][]> => {
    // Static checks only: what machines are, not what they hold.
    const { machines } = await store.clusterFacts();
    const warnings = definitions.map((d) =>
      d.stages.flatMap((st) => {
        const why = neverPlaceable(stageNeed(st), machines);
        return why ? [{ stage: st.name, message: why }] : [];
      }),
    );
    if (strict && warnings.some((w) => w.length)) {
      const issues = warnings.flatMap((w, i) =>
        w.map((x) => ({ path: `${prefix(i)}/stages/${definitions[i]!.stages.findIndex((st) => st.name === x.stage)}`, message: `stage ${x.stage}: ${x.message} (strict: refused)` })),
      );
      throw new ValidationError(issues);
    }
    return warnings;
  };
  const ownJob = (p: Principal | undefined, id: string) => ownJobOf(store, p, id);

  app.post(
    '/v1/jobs',
    {
      schema: {
        summary: 'Submit a job',
        description:
          'Body: a job spec as JSON (application/json) or YAML text (application/yaml). Invalid specs get 400 with every issue and its path; nothing is written. ' +
          'With an `Idempotency-Key` header (kept 24 h), a repeat of the same request answers 200 with the job the first one made, and a different request with that key 409. ' +
          'A stage no registered machine could ever run (a GPU type nobody has, more GPUs or CPUs than any machine) is accepted with a `warnings` entry naming it and why; with `?strict=true` the submit is refused instead (400), and nothing is written.',
        tags: ['jobs'],
        querystring: SubmitQuery,
        body: JobSpecSchema,
        response: { 200: JobView, 201: JobView, ...errors, 409: ErrorBody, 413: ErrorBody, 415: ErrorBody },
      },
      // The spec is validated by parseJobSpec, which reports every issue with friendly paths;
      // the schema above is for the OpenAPI document, and YAML bodies arrive as text.
      validatorCompiler: () => () => true,
      config: { access: 'user', audit: 'job.submit' },
    },
    async (req, reply) => {
      // Not validated (see validatorCompiler above): a JSON value of any shape, or YAML text.
      const raw: unknown = req.body;
      const input = typeof raw === 'string' ? parseJobSpecText(raw) : raw;
      const definition = ownTeam(req.principal, input, parseJobSpec(input));
      const text = typeof raw === 'string' ? raw : JSON.stringify(raw);
      // The source kept with the job never holds a secret's value (docs/security.md).
      const source = hasSecrets(definition) ? JSON.stringify(redactSpec(input)) : text;
      const [warnings] = await placementWarnings([definition], strictOf(req.query), () => '');
      let job;
      try {
        job = await store.jobSubmit({ definition, source, now: clock.now(), idempotency: idempotencyOf(req, text), audit: auditBy(req, 'job.submit') });
      } catch (err) {
        if (!(err instanceof AlreadySubmitted)) throw err;
        // A retry of a submit that was done: the same job, not a second one.
        const first = await store.jobGet({ jobId: err.jobIds[0]! });
        if (!first) throw new ConflictError(`Idempotency-Key "${err.key}" was used for job ${err.jobIds[0]}, which no longer exists (deleted after retention)`);
        req.log.info({ jobId: first.id, key: err.key }, 'job submit repeated: answered with the job it made');
        return reply.status(200).send(jobView(first));
      }
      req.log.info({ jobId: job.id, name: job.name, stages: job.stages.length, ...(warnings!.length ? { neverPlaceable: warnings!.map((w) => w.stage) } : {}) }, 'job submitted');
      return reply.status(201).send({ ...jobView(job), ...(warnings!.length ? { warnings } : {}) });
    },
  );

  app.post(
    '/v1/jobs/batch',
    {
      bodyLimit: MAX_BATCH_BYTES,
      schema: {
        summary: 'Submit many jobs at once',
        description:
          `Body: \`{ jobs: [spec, …] }\` as JSON, or the same as YAML text; at most ${MAX_BATCH_JOBS} jobs, ${MAX_BATCH_STAGES} stages ` +
          `in all and ${MAX_BATCH_BYTES / 2 ** 20} MiB (larger bodies get 413). Each spec is validated as \`POST /v1/jobs\` validates one. ` +
          'All or nothing, in one transaction: an invalid spec gets 400 listing every problem, each path naming its job ' +
          '(`/jobs/3/stages/1/command`), and nothing is written. Answers the new ids and names, in the order given.',
        tags: ['jobs'],
        querystring: SubmitQuery,
        body: Type.Object({ jobs: Type.Array(JobSpecSchema, { minItems: 1, maxItems: MAX_BATCH_JOBS }) }),
        response: { 200: JobBatchResult, 201: JobBatchResult, 400: ErrorBody, 409: ErrorBody, 413: ErrorBody, 415: ErrorBody },
      },
      // Validated by parseJobBatch (every spec by parseJobSpec), as the single route does.
      validatorCompiler: () => () => true,
      config: { access: 'user', audit: 'job.submit-batch' },
    },
    async (req, reply) => {
      // Not validated (see validatorCompiler above): a JSON value of any shape, or YAML text.
      const raw: unknown = req.body;
      const input = typeof raw === 'string' ? parseJobBatchText(raw) : raw;
      const parsed = parseJobBatch(input);
      // Valid, so a list of specs: each names its team or not.
      const specs = (input as { jobs: unknown[] }).jobs;
      const definitions = parsed.map((d, i) => ownTeam(req.principal, specs[i], d, `/jobs/${i}`));
      // Each job keeps its own spec as JSON (a YAML batch's text is one text for all of them).
      const sources = specs.map((spec, i) => JSON.stringify(hasSecrets(definitions[i]!) ? redactSpec(spec) : spec));
      const warnings = await placementWarnings(definitions, strictOf(req.query), (i) => `/jobs/${i}`);
      let ids: readonly string[];
      try {
        ids = await store.jobSubmitBatch({
          definitions,
          sources,
          now: clock.now(),
          idempotency: idempotencyOf(req, typeof raw === 'string' ? raw : JSON.stringify(raw)),
          audit: auditBy(req, 'job.submit-batch'),
        });
      } catch (err) {
        if (!(err instanceof AlreadySubmitted)) throw err;
        // A retry of a batch that was done: the same jobs, not new ones.
        return reply.status(200).send({ jobs: err.jobIds.map((id, i) => ({ id, name: definitions[i]!.name })) });
      }
      req.log.info({ jobs: ids.length, stages: definitions.reduce((n, d) => n + d.stages.length, 0) }, 'job batch submitted');
      return reply.status(201).send({ jobs: ids.map((id, i) => ({ id, name: definitions[i]!.name, ...(warnings[i]!.length ? { warnings: warnings[i] } : {}) })) });
    },
  );

  app.get(
    '/v1/jobs',
    {
      config: { access: 'user' },
      schema: {
        summary: 'List jobs, newest first (a team token: its own team\'s only)',
        tags: ['jobs'],
        querystring: Type.Object({
          state: Type.Optional(Type.Union(jobStates.map((s) => Type.Literal(s)))),
          team: Type.Optional(Type.String()),
          name: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'jobs whose name holds this text, in any case' })),
          limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 50 })),
          before: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'the next page: jobs listed after this job id (the last of the previous page)' })),
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
      const jobs = await store.jobList({ state: q.state, team: scope ?? q.team, name: q.name, limit: q.limit ?? 50, ...(q.before !== undefined ? { before: q.before } : {}) });
      return { jobs: jobs.map(jobSummaryView) };
    },
  );

  app.get(
    '/v1/jobs/:id',
    { config: { access: 'user' }, schema: { summary: 'A job with its stages and attempts', tags: ['jobs'], params: JobParams, response: { 200: JobView, ...errors } } },
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
      return { events: (await store.eventsList({ jobId: id, afterSeq: q.after, limit: q.limit ?? 1000 })).map(eventView) };
    },
  );

  app.get(
    '/v1/jobs/:id/stages/:stage/explain',
    {
      config: { access: 'user' },
      schema: {
        summary: 'Why a stage is not running: the binding reason, machines left after each constraint, its place in the queue, and what change would let it run',
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
      const quota = s.state === 'ready' ? ((await quotaReasons(store, job.team, [s], machines)).get(s.id) ?? null) : null;
      const current = s.attempts.find((a) => a.id === s.currentAttemptId);
      const reason =
        s.state === 'ready'
          ? s.notBefore !== null && s.notBefore > now
            ? (s.pendingReason ?? `backing off until ${new Date(s.notBefore).toISOString()}`)
            : (quota ?? fit.reason)
          : s.state === 'pending'
            ? `waits for ${waitsFor.map((u) => `${u.stage} (${u.state})`).join(', ') || 'its upstream stages'}`
            : s.state === 'scheduled' || s.state === 'running'
              ? `${s.state} on ${current?.machineName ?? 'a machine'} (attempt ${current?.number ?? '?'})`
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
        suggestions: s.state === 'ready' ? fit.suggestions : [],
      };
    },
  );

  app.get(
    '/v1/jobs/:id/stages/:stage/logs',
    {
      // Follow (?follow=1) answers server-sent events; otherwise text or JSON, whatever the Accept.
      sse: { kind: 'manual', heartbeat: true },
      config: { access: 'user' },
      schema: {
        summary: "A stage's stdout and stderr (latest attempt unless `attempt` is given); live with `follow`",
        description:
          'Text streams the whole log. `format=json` returns one page of chunks (`limit`, default 1000); pass the last chunk id as `after` for the next. ' +
          '`follow=1` streams it as server-sent events until the log is complete: `chunk` messages (`id` the chunk id, `data` the chunk as in `format=json`), ' +
          'then one `end` (`data`: `{attempt, state}`), and the stream closes. It waits for a stage that has not run yet; a dropped stream resumes after `Last-Event-ID` (or `after`).',
        tags: ['jobs'],
        params: StageParams,
        querystring: Type.Object({
          attempt: Type.Optional(Type.Integer({ minimum: 1 })),
          after: Type.Optional(Type.Integer({ minimum: 0 })),
          limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 5000 })),
          format: Type.Optional(Type.Union([Type.Literal('text'), Type.Literal('json')])),
          follow: Type.Optional(Type.Unsafe<'1' | 'true' | '0' | 'false'>({ type: 'string', enum: ['1', 'true', '0', 'false'], description: '1 or true: stream as server-sent events until the log is complete' })),
        }),
      },
    },
    async (req, reply) => {
      const { id, stage } = req.params;
      const q = req.query;
      const follow = q.follow === '1' || q.follow === 'true';
      await ownJob(req.principal, id);
      // A stage that has not run, or an attempt it never had, has no log to show: said, not an empty answer.
      const detail = (await store.jobGet({ jobId: id }))?.stages.find((s) => s.name === stage);
      if (!detail) throw new NotFoundError('stage', `${id}/${stage}`);
      // Following the stage waits for it to start; an attempt named must be one it has had.
      if (follow && q.attempt === undefined) return streamLog(ctx, reply, { jobId: id, stage, ...(q.after !== undefined ? { after: q.after } : {}) });
      if (detail.attempts.length === 0) throw new NotFoundError('log', `${id}/${stage}`, `stage ${stage} of job ${id} has no log: it has not run yet (it is ${detail.state})`);
      if (q.attempt !== undefined && !detail.attempts.some((a) => a.number === q.attempt)) {
        const numbers = detail.attempts.map((a) => a.number);
        throw new NotFoundError('log', `${id}/${stage}`, `stage ${stage} of job ${id} has no attempt ${q.attempt}: its attempts are ${numbers.join(', ')}`);
      }
      if (follow) return streamLog(ctx, reply, { jobId: id, stage, attempt: q.attempt, ...(q.after !== undefined ? { after: q.after } : {}) });
      const page = (afterId: number | undefined, limit: number) => store.stageLogs({ jobId: id, stage, attempt: q.attempt, afterId, limit });
      const first = await page(q.after, q.limit ?? 1000);
      if (!first) throw new NotFoundError('stage', `${id}/${stage}`);
      if (q.format === 'json') return { chunks: first.map(logChunkView) };
      // Text: streamed page by page, so a large log never sits whole in the server's memory.
      async function* pages() {
        let chunks = first!;
        while (chunks.length) {
          yield chunks.map((c) => c.data).join('');
          chunks = (await page(chunks.at(-1)!.id, 1000)) ?? [];
        }
      }
      return reply.type('text/plain; charset=utf-8').send(Readable.from(pages()));
    },
  );

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

  // YAML job specs arrive as text; JSON ones are parsed by Fastify.
  app.addContentTypeParser(['application/yaml', 'application/x-yaml', 'text/yaml', 'text/plain'], { parseAs: 'string' }, (_req, body, done) => {
    done(null, body);
  });
}


/**
 * A team token submits for its own team: a spec that names none is its team's, and one that
 * names another is refused, the job's path given (`at`).
 */
function ownTeam(p: Principal | undefined, input: unknown, d: JobDefinition, at = ''): JobDefinition {
  const scope = teamScope(p);
  if (scope === null) return d;
  const named = typeof input === 'object' && input !== null && 'team' in input;
  if (named && d.team !== scope) throw new ForbiddenError(`${at}/team: a token of team ${scope} submits for team ${scope} only, not ${d.team}`);
  return { ...d, team: scope };
}
