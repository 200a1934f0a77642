import type { ApiApp } from './api-app.js';
import { Type } from 'typebox';
import { ConflictError, NotFoundError } from '../domain/errors.js';
import { formatCpu, formatMemory, parseCpuMillis, parseMemoryBytes, QuantityError } from '../spec/quantity.js';
import { ValidationError, type ValidationIssue } from '../spec/validation-error.js';
import { normalizeGpuType } from '../domain/resources.js';
import { dominantShare, emptyTeamUsage, formatTeamQuota, isBorrowing, isGpuAmount, type Team, type TeamQuota, type TeamUsage } from '../domain/team.js';
import { machineRefusal } from '../scheduler/checks.js';
import { TeamLedger } from '../scheduler/team-ledger.js';
import type { ApiContext } from './api-context.js';
import { auditBy } from './auth/audit-entry.js';
import { ErrorBody } from './contract/job-view.js';
import { TeamChangeRequest, TeamCreateRequest, TeamView, type QuotaWire } from './contract/team-view.js';

const tags = ['teams'];
const errors = { 400: ErrorBody, 401: ErrorBody, 403: ErrorBody, 404: ErrorBody, 409: ErrorBody };
const TeamParams = Type.Object({ name: Type.String({ minLength: 1, maxLength: 200 }) });

/** The wire's quota in integer units; every bad part named, under `path`. */
function quotaFrom(w: QuotaWire, path: string): TeamQuota {
  const issues: ValidationIssue[] = [];
  const q: TeamQuota = {};
  const take = <T>(at: string, f: () => T): T | undefined => {
    try {
      return f();
    } catch (err) {
      if (!(err instanceof QuantityError)) throw err;
      issues.push({ path: `${path}/${at}`, message: err.message });
      return undefined;
    }
  };
  if (w.cpu !== undefined) {
    const v = take('cpu', () => parseCpuMillis(w.cpu!));
    if (v !== undefined) q.cpuMillis = v;
  }
  if (w.memory !== undefined) {
    const v = take('memory', () => parseMemoryBytes(w.memory!));
    if (v !== undefined) q.memoryBytes = v;
  }
  if (w.outputs !== undefined) {
    const v = take('outputs', () => parseMemoryBytes(w.outputs!));
    if (v !== undefined) q.outputBytes = v;
  }
  if (w.gpus && Object.keys(w.gpus).length) {
    // Shares of a GPU are counted in thousandths: a quota finer than that could not be kept.
    for (const [t, n] of Object.entries(w.gpus)) {
      if (!isGpuAmount(n)) issues.push({ path: `${path}/gpus/${t}`, message: `${n} GPUs: at most 3 decimals (thousandths of a GPU), e.g. 2.5` });
    }
    q.gpus = Object.fromEntries(Object.entries(w.gpus).map(([t, n]) => [normalizeGpuType(t), n]));
  }
  if (issues.length) throw new ValidationError(issues);
  return q;
}

function amounts(u: TeamQuota | TeamUsage) {
  const cpu = 'cpuMillis' in u && u.cpuMillis !== undefined ? formatCpu(u.cpuMillis) : null;
  const memory = 'memoryBytes' in u && u.memoryBytes !== undefined ? formatMemory(u.memoryBytes) : null;
  return { cpu, memory, gpus: { ...(u.gpus ?? {}) } };
}

function teamView(t: Team, usage: TeamUsage, total: TeamUsage): TeamView {
  return {
    name: t.name,
    weight: t.weight,
    quota: amounts(t.quota),
    usage: amounts(usage),
    borrowing: isBorrowing(t.quota, usage),
    share: dominantShare(usage, t.weight, total),
    quotaText: formatTeamQuota(t.quota),
    createdAt: new Date(t.createdAt).toISOString(),
  };
}

/** Teams, their quotas and fair-share weights (docs/scheduling.md): admins change them, anyone with a token reads them. */
export function teamRoutes(app: ApiApp, ctx: ApiContext): void {
  const { store, clock } = ctx;

  const views = async (only?: string): Promise<TeamView[]> => {
    const [teams, usage, cluster] = [await store.teamList(), await store.schedulerTeams({ usage: true }), await store.clusterFacts()];
    const total = new TeamLedger(
      [],
      cluster.machines.filter((m) => machineRefusal(m) === null),
    ).total;
    const byName = new Map(usage.map((u) => [u.name, u.usage]));
    return teams.filter((t) => only === undefined || t.name === only).map((t) => teamView(t, byName.get(t.name) ?? emptyTeamUsage(), total));
  };

  app.post(
    '/v1/teams',
    {
      config: { access: 'admin', audit: 'team.create' },
      schema: { summary: 'Make a team, with a fair-share weight and a quota', tags, body: TeamCreateRequest, response: { 201: TeamView, ...errors } },
    },
    async (req, reply) => {
      const body = req.body;
      if (await store.teamGet({ name: body.name }))
        throw new ConflictError(`team ${body.name} exists already; change it with PATCH /v1/teams/${body.name} (gantry team set)`);
      const quota = body.quota ? quotaFrom(body.quota, '/quota') : {};
      await store.teamPut({
        name: body.name,
        ...(body.weight !== undefined ? { weight: body.weight } : {}),
        quota,
        create: true,
        now: clock.now(),
        audit: auditBy(req, 'team.create'),
      });
      req.log.info({ team: body.name, by: req.principal?.tokenId }, 'team created');
      // Made in this request: there to read (a team is never deleted).
      return reply.status(201).send((await views(body.name))[0]!);
    },
  );

  app.patch(
    '/v1/teams/:name',
    {
      config: { access: 'admin', audit: 'team.change' },
      schema: {
        summary: "Change a team's weight or quota (a quota given replaces the old one; {} removes every limit)",
        tags,
        params: TeamParams,
        body: TeamChangeRequest,
        response: { 200: TeamView, ...errors },
      },
    },
    async (req) => {
      const { name } = req.params;
      const body = req.body;
      const quota = body.quota ? quotaFrom(body.quota, '/quota') : undefined;
      await store.teamPut({
        name,
        ...(body.weight !== undefined ? { weight: body.weight } : {}),
        ...(quota ? { quota } : {}),
        create: false,
        now: clock.now(),
        audit: auditBy(req, 'team.change'),
      });
      return (await views(name))[0];
    },
  );

  app.get(
    '/v1/teams',
    {
      config: { access: 'user' },
      schema: {
        summary: 'Teams with their weights, quotas and what they hold now',
        tags,
        response: { 200: Type.Object({ teams: Type.Array(TeamView) }), ...errors },
      },
    },
    async () => ({ teams: await views() }),
  );

  app.get(
    '/v1/teams/:name',
    {
      config: { access: 'user' },
      schema: { summary: 'One team: weight, quota, usage, share', tags, params: TeamParams, response: { 200: TeamView, ...errors } },
    },
    async (req) => {
      const { name } = req.params;
      const v = (await views(name))[0];
      if (!v) throw new NotFoundError('team', name);
      return v;
    },
  );
}
