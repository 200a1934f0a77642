import type { Store } from '../store/store.js';
import { Type } from 'typebox';
import { AlreadySubmitted, ConflictError, ForbiddenError } from '../domain/errors.js';
import { JobSpecSchema, parseJobSpec } from '../domain/job-spec.js';
import { MAX_BATCH_STAGES, parseJobBatch } from '../domain/job-batch.js';
import type { JobDefinition } from '../domain/job-definition.js';
import { hasSecrets, redactSpec } from '../domain/secret-env.js';
import {
  BATCH_JSON_BOUNDS,
  MAX_BATCH_BYTES,
  MAX_BATCH_JOBS,
  MAX_BATCH_JSON_NODES,
  MAX_BATCH_NODES,
  MAX_SPEC_ALIASES,
  MAX_SPEC_BYTES,
  MAX_SPEC_DEPTH,
  SPEC_BOUNDS,
} from '../spec/spec-limits.js';
import { ValidationError } from '../spec/validation-error.js';
import { templateMachine, type PoolTemplate } from '../autoscale/pool-template.js';
import { gangNeedOf, gangTotal } from '../scheduler/gang-placer.js';
import { gangNeverPlaceable, neverPlaceable } from '../scheduler/never-placeable.js';
import { stageNeed } from '../scheduler/checks.js';
import { TeamLedger } from '../scheduler/team-ledger.js';
import type { ApiApp } from './api-app.js';
import type { ApiContext } from './api-context.js';
import { JobBatchResult } from './contract/job-batch.js';
import { ErrorBody, JobView, type SubmitWarning } from './contract/job-view.js';
import { jobView } from './views.js';
import { idempotencyOf } from './idempotency.js';
import { teamScope, type Principal } from './auth/principal.js';
import { auditBy } from './auth/audit-entry.js';
import { specBodyParsers } from './spec-body-parsers.js';
import { OffLoopSpecText } from './off-loop-spec-text.js';

const errors = { 400: ErrorBody, 404: ErrorBody };
/**
 * The submit routes' query. Not validated (their validator accepts anything, for the YAML bodies'
 * sake): a value other than `true` or `1`, a repeated one included, reads as not strict.
 */
const SubmitQuery = Type.Object({
  strict: Type.Optional(
    Type.String({
      description:
        "true or 1: a stage no registered machine could ever run, or more than its team's whole quota, refuses the submit (400) instead of a warning",
    }),
  ),
});

/** `?strict=true` (or 1): a stage no registered machine could ever run, or more than its team's whole quota, refuses the submit instead of a warning. */
function strictOf(query: { strict?: string }): boolean {
  return query.strict === 'true' || query.strict === '1';
}

/** `POST /v1/jobs` and `POST /v1/jobs/batch`: one spec or many, as JSON or YAML text. */
export function jobSubmitRoutes(app: ApiApp, ctx: ApiContext): void {
  const { store, clock } = ctx;
  // Large YAML texts are read on a thread of their own: the parser takes seconds a megabyte.
  const texts = new OffLoopSpecText();
  app.addHook('onClose', () => texts.close());

  app.post(
    '/v1/jobs',
    {
      // The spec's own size limit, whatever the server's default for other bodies: over it, 413.
      bodyLimit: MAX_SPEC_BYTES,
      schema: {
        summary: 'Submit a job',
        description:
          'Body: a job spec as JSON (application/json) or YAML text (application/yaml), at most 1 MiB (413 beyond), nested at most 32 levels, with at most 100,000 values and 100 YAML anchors and aliases (400 naming the bound and its line). ' +
          'Invalid specs get 400 with every issue and its path; nothing is written. ' +
          "With an `Idempotency-Key` header (kept 24 h; a key is its team's, or an admin token's own), a repeat of the same request answers 200 with the job the first one made, and a different request with that key 409. " +
          "A stage no registered machine (nor an autoscaled pool's template) could ever run (a GPU type nobody has, more GPUs or CPUs than any machine), or one not preemptible that asks for more than its team's whole quota of a resource, " +
          'is accepted with a `warnings` entry naming it and why; with `?strict=true` the submit is refused instead (400), and nothing is written.',
        tags: ['jobs'],
        querystring: SubmitQuery,
        body: JobSpecSchema,
        response: { 200: JobView, 201: JobView, ...errors, 409: ErrorBody, 413: ErrorBody, 415: ErrorBody },
      },
      // The spec is validated by parseJobSpec, which reports every issue with friendly paths;
      // the schema above is for the OpenAPI document, and YAML bodies arrive as text.
      validatorCompiler: () => () => true,
      config: { access: 'user', audit: 'job.submit', specBounds: SPEC_BOUNDS },
    },
    async (req, reply) => {
      // Not validated (see validatorCompiler above): a JSON value of any shape, or YAML text.
      const raw: unknown = req.body;
      const input = typeof raw === 'string' ? await texts.read('spec', raw) : raw;
      const definition = ownTeam(req.principal, input, parseJobSpec(input));
      const text = typeof raw === 'string' ? raw : JSON.stringify(raw);
      // The source kept with the job never holds a secret's value (docs/security.md).
      const source = hasSecrets(definition) ? JSON.stringify(redactSpec(input)) : text;
      const [warnings] = await placementWarnings(store, ctx.config.pools, [definition], strictOf(req.query), () => '');
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
      req.log.info(
        { jobId: job.id, name: job.name, stages: job.stages.length, ...(warnings!.length ? { neverPlaceable: warnings!.map((w) => w.stage) } : {}) },
        'job submitted',
      );
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
          `in all and ${MAX_BATCH_BYTES / 2 ** 20} MiB (larger bodies get 413), nested at most ${MAX_SPEC_DEPTH} levels, with at most ${MAX_BATCH_JSON_NODES} values as JSON, ${MAX_BATCH_NODES} as YAML, and ${MAX_SPEC_ALIASES} YAML anchors and aliases (400). ` +
          'Each spec is validated as `POST /v1/jobs` validates one. ' +
          'All or nothing, in one transaction: an invalid spec gets 400 listing every problem, each path naming its job ' +
          '(`/jobs/3/stages/1/command`), and nothing is written. Answers the new ids and names, in the order given.',
        tags: ['jobs'],
        querystring: SubmitQuery,
        body: Type.Object({ jobs: Type.Array(JobSpecSchema, { minItems: 1, maxItems: MAX_BATCH_JOBS }) }),
        response: { 200: JobBatchResult, 201: JobBatchResult, 400: ErrorBody, 409: ErrorBody, 413: ErrorBody, 415: ErrorBody },
      },
      // Validated by parseJobBatch (every spec by parseJobSpec), as the single route does.
      validatorCompiler: () => () => true,
      config: { access: 'user', audit: 'job.submit-batch', specBounds: BATCH_JSON_BOUNDS },
    },
    async (req, reply) => {
      // Not validated (see validatorCompiler above): a JSON value of any shape, or YAML text.
      const raw: unknown = req.body;
      const input = typeof raw === 'string' ? await texts.read('batch', raw) : raw;
      const parsed = parseJobBatch(input);
      // Valid, so a list of specs: each names its team or not.
      const specs = (input as { jobs: unknown[] }).jobs;
      const definitions = parsed.map((d, i) => ownTeam(req.principal, specs[i], d, `/jobs/${i}`));
      // Each job keeps its own spec as JSON (a YAML batch's text is one text for all of them).
      const sources = specs.map((spec, i) => JSON.stringify(hasSecrets(definitions[i]!) ? redactSpec(spec) : spec));
      const warnings = await placementWarnings(store, ctx.config.pools, definitions, strictOf(req.query), (i) => `/jobs/${i}`);
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
      return reply
        .status(201)
        .send({ jobs: ids.map((id, i) => ({ id, name: definitions[i]!.name, ...(warnings[i]!.length ? { warnings: warnings[i] } : {}) })) });
    },
  );

  // YAML job specs arrive as text; JSON ones are scanned against the route's bounds, then parsed.
  specBodyParsers(app);
}

/**
 * The stages of these jobs that no registered machine could ever run, or that ask for more than
 * their team's whole quota, per job (docs/scheduling.md, "Never placeable"). Strict: refused, as a
 * bad spec is, naming each such stage.
 */
async function placementWarnings(
  store: Store,
  pools: readonly PoolTemplate[],
  definitions: readonly JobDefinition[],
  strict: boolean,
  prefix: (i: number) => string,
): Promise<SubmitWarning[][]> {
  // Static checks only: what machines are, not what they hold; a team's quota, not its usage.
  // An autoscaled pool's template is a machine that may come (docs/autoscaling.md): a stage only
  // it fits waits for the autoscaler, not for good. A pool of max 0 starts nothing.
  const facts = await store.clusterFacts();
  const machines = [...facts.machines, ...poolMachines(pools, 1)];
  // A stage that is not preemptible never runs past its team's quota (docs/scheduling.md), so
  // one asking for more than the whole quota would wait for good, as Slurm's QOSMaxGRESPerJob.
  const quotas = definitions.some((d) => d.stages.some((st) => !st.preemptible))
    ? new TeamLedger(await store.schedulerTeams({ usage: false }), machines)
    : null;
  const warnings = definitions.map((d) =>
    d.stages.flatMap((st) => {
      const need = stageNeed(st);
      // A gang by the gang's rule (docs/gangs.md): all its members at once on the registered
      // machines as if idle, with as many machines of each pool's template as the pool may
      // start (up to the gang's size: the autoscaler starts machines for a gang), and its whole
      // size against its team's quota.
      const gang = gangNeedOf(st);
      const why = gang
        ? (gangNeverPlaceable(gang, [...facts.machines, ...poolMachines(pools, gang.size)], pools.length > 0) ??
          (st.preemptible ? null : quotas!.neverWithinQuota(d.team, gangTotal(gang), machines)))
        : (neverPlaceable(need, machines, pools.length > 0) ?? (st.preemptible ? null : quotas!.neverWithinQuota(d.team, need, machines)));
      return why ? [{ stage: st.name, message: why }] : [];
    }),
  );
  if (strict && warnings.some((w) => w.length)) {
    const issues = warnings.flatMap((w, i) =>
      w.map((x) => ({
        path: `${prefix(i)}/stages/${definitions[i]!.stages.findIndex((st) => st.name === x.stage)}`,
        message: `stage ${x.stage}: ${x.message} (strict: refused)`,
      })),
    );
    throw new ValidationError(issues);
  }
  return warnings;
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

/** Up to `upTo` machines of each autoscaled pool's template (at most its max): what the autoscaler may start for a gang. */
function poolMachines(pools: readonly PoolTemplate[], upTo: number) {
  return pools.flatMap((p) =>
    Array.from({ length: Math.min(p.autoscale.max, upTo) }, (_, i) => templateMachine(p.template, `pool:${p.name}:${i + 1}`, `pool ${p.name} #${i + 1}`)),
  );
}
