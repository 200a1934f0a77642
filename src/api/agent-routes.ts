import { randomUUID } from 'node:crypto';
import type { ApiApp } from './api-app.js';
import { Type } from 'typebox';
import { Topic } from '../domain/topic.js';
import { isSuccessfulEnd } from '../domain/attempt-end-policy.js';
import { ForbiddenError } from '../domain/errors.js';
import { ValidationError } from '../spec/validation-error.js';
import { TokenKind } from '../domain/token-kind.js';
import { newTokenId, newTokenSecret, tokenHash } from './auth/token-secret.js';
import { auditBy } from './auth/audit-entry.js';
import type { ApiContext } from './api-context.js';
import {
  DrainSelfRequest,
  DrainSelfResponse,
  CompleteRequest,
  CompleteResponse,
  LogsRequest,
  LogsResponse,
  RegisterRequest,
  ReportRequest,
  ReportResponse,
  type ReportItemResult,
  RegisterResponse,
  StartRequest,
} from './contract/agent-protocol.js';
import { ErrorBody } from './contract/job-view.js';
import { agentHeartbeatRoute } from './agent-heartbeat-route.js';
import { agentOutputRoutes } from './agent-output-routes.js';
import { missingOutputs } from './missing-outputs.js';
import { ReportMemory } from './report-memory.js';
import { typedCompletion } from './typed-completion.js';
import { AGENT_PROTOCOL_VERSION } from './contract/attempt-end.js';
import { MAX_HEARTBEAT_PERIOD_MS } from '../domain/heartbeat-period.js';

const AttemptParams = Type.Object({ id: Type.String({ maxLength: 100 }) });
const tags = ['agent'];
const errors = { 400: ErrorBody, 404: ErrorBody, 409: ErrorBody };

/**
 * The internal API agents speak (see src/api/contract/agent-protocol.ts for the timeline); the
 * heartbeat's long-poll and the attempts' files have files of their own.
 */
export function agentRoutes(app: ApiApp, ctx: ApiContext): void {
  const { store, clock, config } = ctx;
  // Ids unique across replicas and restarts: NATS drops a repeated id within its duplicate window.
  const logsWritten = (attemptId: string) => {
    ctx.bus.publish({ id: `logs:${randomUUID()}`, topic: Topic.logsWritten, payload: { attemptId } }).catch(() => {});
  };
  const settings = {
    heartbeatMs: config.heartbeatMs,
    leaseMs: config.leaseMs,
    killGraceMs: config.killGraceMs,
    disconnectGraceMs: config.disconnectGraceMs,
    reportAssignments: true,
    startedAssignments: true,
    protocol: AGENT_PROTOCOL_VERSION,
    knownAsOf: true,
    // Only where a shed arrival is recorded (the control plane's liveness loop) and there is a budget.
    ...(ctx.liveness && config.maxHeartbeatsPerSecond > 0 ? { shedding: true } : {}),
  };
  // What reports carried, left out of heartbeats' answers (report-memory.ts); remembered longer
  // than a heartbeat is ever held (at most its period, which grows with the fleet up to 30 s).
  const reported = new ReportMemory(2 * Math.max(config.heartbeatMs, config.maxHeartbeatsPerSecond > 0 ? MAX_HEARTBEAT_PERIOD_MS : 0));

  app.post(
    '/v1/agent/register',
    {
      config: { access: 'join', audit: 'machine.register' },
      schema: {
        summary: 'Register (or re-register) a machine by name',
        tags,
        body: RegisterRequest,
        response: { 200: RegisterResponse, 400: ErrorBody, 401: ErrorBody, 403: ErrorBody, 409: ErrorBody },
      },
    },
    async (req) => {
      // What the agent enforces is a machine's column of its own (docs/containment.md), not part of
      // the agent's free-form description; an agent before containment sends none: null.
      const { containment, ...agent } = req.body.agent;
      // The schema bounds each end; their order is the one thing it cannot say.
      const ports = agent.gangPorts;
      if (ports && ports.first > ports.last)
        throw new ValidationError([{ path: '/agent/gangPorts', message: `first (${ports.first}) is after last (${ports.last})` }]);
      const body = { ...req.body, agent, containment: containment ?? null };
      const p = req.principal!;
      const now = clock.now();
      if (p.kind === 'machine') {
        // Again, with its own credential (an agent restarted): the same machine, under its own name.
        const own = await store.machineGet({ machineId: p.machineId! });
        if (!own || own.name !== body.name) {
          req.log.warn({ tokenId: p.tokenId, machineId: p.machineId, asked: body.name }, 'machine credential refused: registering another machine');
          throw new ForbiddenError(`the credential of machine ${own?.name ?? p.machineId} cannot register machine ${body.name}`);
        }
        const m = await store.machineRegister({ ...body, now, audit: auditBy(req, 'machine.register', body.name) });
        req.log.info({ machine: m.name, machineId: m.id, gpus: m.gpus.length, declared: m.gpusDeclared }, 'machine registered again');
        return { machineId: m.id, settings };
      }
      // Joining (a join or admin token): the machine gets a credential of its own, shown once.
      const credential = newTokenSecret(TokenKind.machine);
      const m = await store.machineRegister({
        ...body,
        now,
        credential: { id: newTokenId(now), hash: tokenHash(credential) },
        audit: auditBy(req, 'machine.join', body.name),
      });
      ctx.tokens.forget({ machineId: m.id });
      req.log.info({ machine: m.name, machineId: m.id, gpus: m.gpus.length, declared: m.gpusDeclared, joinedWith: p.tokenId }, 'machine joined');
      return { machineId: m.id, settings, credential };
    },
  );

  app.post(
    '/v1/agent/machines/:id/drain',
    {
      config: { access: 'machine', audit: 'machine.drain-self' },
      schema: {
        summary: 'The agent stops for good: drain its own machine (now: stop its stages at once, requeued, charged to no budget)',
        tags,
        params: AttemptParams,
        body: DrainSelfRequest,
        response: { 200: DrainSelfResponse, ...errors },
      },
    },
    async (req): Promise<DrainSelfResponse> => {
      const { id } = req.params;
      const body = req.body;
      const r = await store.machineDrain({
        machine: id,
        now: clock.now(),
        stopRunning: body.now === true,
        jitter: ctx.random(),
        audit: auditBy(req, 'machine.drain-self', id),
      });
      req.log.info({ machine: r.machine.name, machineId: id, now: body.now === true, stopped: r.stopped ?? 0 }, 'agent drains its machine');
      return { stopped: r.stopped ?? 0 };
    },
  );

  agentHeartbeatRoute(app, ctx, reported);

  app.post(
    '/v1/agent/machines/:id/report',
    {
      config: { access: 'machine' },
      schema: {
        summary: 'A batched report: acknowledgements, pids and outcomes of many attempts, one transaction, one answer per item',
        tags,
        params: AttemptParams,
        body: ReportRequest,
        response: { 200: ReportResponse, ...errors },
      },
    },
    async (req) => {
      const { id } = req.params;
      const body = req.body;
      // Outputs are committed only if every file named was really uploaded, whole; an outcome
      // naming one that is not is refused on its own, before the transaction.
      const refused = new Map<string, ReportItemResult>();
      // Typed here, once: past this line an outcome's end is its kind, whichever protocol the agent speaks.
      const outcomes = body.completed.map((c) => typedCompletion(c.attemptId, c));
      const problems = await missingOutputs(
        ctx,
        id,
        outcomes.filter((c) => isSuccessfulEnd(c) && c.outputs.length),
      );
      for (const [attemptId, problem] of problems) refused.set(attemptId, { attemptId, result: 'refused', message: problem });
      const r = await store.machineReport({
        machineId: id,
        started: body.started,
        completed: outcomes.filter((c) => !refused.has(c.attemptId)),
        now: clock.now(),
        leaseMs: ctx.period?.startLeaseMs ?? config.leaseMs,
        jitter: ctx.random,
        onItemError: (attemptId, err) => req.log.error({ machineId: id, attemptId, err }, 'report item refused: it failed'),
        // What this transaction places here is written running and spawned on the answer, with no
        // acknowledgement: only for an agent that said it runs such assignments, and asked for its work.
        startOnPlacement: body.startAssignments === true && body.assignments === true && body.completed.length > 0,
      });
      const stale = [...r.started, ...r.completed].filter((x) => x.result === 'stale');
      if (stale.length) req.log.warn({ machineId: id, stale }, 'stale report refused');
      const done = new Map(r.completed.map((x) => [x.attemptId, x]));
      const completed = body.completed.map((c) => refused.get(c.attemptId) ?? done.get(c.attemptId)!);
      // Recorded or not, an outcome says the process ended: no held heartbeat orders it killed.
      if (body.completed.length)
        reported.ended(
          id,
          body.completed.map((c) => c.attemptId),
          clock.now(),
        );
      // Outcomes free room, and the transaction placed what it could there: the agent asked to
      // have that now rather than on a heartbeat's answer (docs/agent.md).
      if (body.assignments && body.completed.length) {
        const started = r.startedOnPlacement ?? [];
        const assignments = await store.machineAssignments({
          machineId: id,
          exclude: body.started.map((s) => s.attemptId),
          ...(started.length ? { started } : {}),
          outputs: ctx.config.outputs,
        });
        reported.offered(
          id,
          assignments.map((a) => a.attemptId),
          clock.now(),
          new Set(started),
        );
        // After the reads: no earlier than the start of anything this answer carries started.
        return { started: r.started, completed, assignments, asOf: clock.now() };
      }
      return { started: r.started, completed, asOf: clock.now() };
    },
  );

  app.post(
    '/v1/agent/attempts/:id/start',
    {
      config: { access: 'machine' },
      schema: {
        summary: 'Acknowledge an assignment: the attempt is running',
        tags,
        params: AttemptParams,
        body: StartRequest,
        response: { 200: Type.Object({ state: Type.String() }), ...errors },
      },
    },
    async (req) => {
      const { id } = req.params;
      const body = req.body;
      const a = await store.attemptStart({
        attemptId: id,
        token: body.token,
        pid: body.pid,
        now: clock.now(),
        // The machine's period is not read here: a lease long enough for the longest one given lately.
        leaseMs: ctx.period?.startLeaseMs ?? config.leaseMs,
        machineId: req.principal!.machineId!,
      });
      return { state: a.state };
    },
  );

  app.post(
    '/v1/agent/attempts/:id/logs',
    {
      config: { access: 'machine' },
      schema: {
        summary: "Store pieces of an attempt's log, each byte once; answers how far each stream has come",
        tags,
        params: AttemptParams,
        body: LogsRequest,
        response: { 200: LogsResponse, ...errors },
      },
    },
    async (req): Promise<LogsResponse> => {
      const { id } = req.params;
      const body = req.body;
      const marks = await store.attemptLogAppend({
        attemptId: id,
        token: body.token,
        chunks: body.chunks,
        now: clock.now(),
        machineId: req.principal!.machineId!,
        caps: ctx.config.logCaps,
      });
      // Streams following this log read on (log-stream.ts): a hint from memory, not awaited, never stored.
      if (body.chunks.length) logsWritten(id);
      return marks;
    },
  );

  app.post(
    '/v1/agent/attempts/:id/complete',
    {
      config: { access: 'machine' },
      schema: {
        summary: "Report an attempt's outcome, fenced by its token",
        tags,
        params: AttemptParams,
        body: CompleteRequest,
        response: { 200: CompleteResponse, ...errors },
      },
    },
    async (req) => {
      const { id } = req.params;
      const body = req.body;
      const outcome = typedCompletion(id, body);
      // Outputs are committed only if every file named was really uploaded, whole.
      const problem =
        isSuccessfulEnd(outcome) && outcome.outputs.length ? (await missingOutputs(ctx, req.principal!.machineId!, [outcome])).get(id) : undefined;
      if (problem) throw new ValidationError([{ path: '/outputs', message: problem }]);
      const r = await store.attemptComplete({ ...outcome, now: clock.now(), jitter: ctx.random(), machineId: req.principal!.machineId! });
      req.log.info({ attemptId: id, accepted: r.accepted, exitCode: body.exitCode, jobState: r.jobState }, 'attempt complete');
      return { accepted: r.accepted, jobState: r.jobState };
    },
  );

  agentOutputRoutes(app, ctx);
}
