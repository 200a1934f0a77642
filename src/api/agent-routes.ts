import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type { Readable } from 'node:stream';
import { Type } from 'typebox';
import { Topic } from '../domain/topic.js';
import { isCleanExit } from '../domain/attempt-state.js';
import { ForbiddenError, NotFoundError } from '../domain/errors.js';
import { errorText } from '../lib/error-text.js';
import { ValidationError } from '../spec/validation-error.js';
import { TokenKind } from '../domain/token-kind.js';
import { newTokenId, newTokenSecret, tokenHash } from './auth/token-secret.js';
import { auditBy } from './auth/audit-entry.js';
import { ArtifactStore } from '../artifacts/artifact-store.js';
import type { ApiContext } from './api-context.js';
import {
  DrainSelfRequest,
  DrainSelfResponse,
  CompleteRequest,
  CompleteResponse,
  HeartbeatRequest,
  HeartbeatResponse,
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
import { machineWaiter } from './long-poll.js';
import { ReportMemory } from './report-memory.js';

const AttemptParams = Type.Object({ id: Type.String({ maxLength: 100 }) });
const tags = ['agent'];
const errors = { 400: ErrorBody, 404: ErrorBody, 409: ErrorBody };

/** The internal API agents speak (see src/api/contract/agent-protocol.ts for the timeline). */
export function agentRoutes(app: FastifyInstance, ctx: ApiContext): void {
  const { store, clock, config } = ctx;
  // Ids unique across replicas and restarts: NATS drops a repeated id within its duplicate window.
  const logsWritten = (attemptId: string) => {
    ctx.bus.publish({ id: `logs:${randomUUID()}`, topic: Topic.logsWritten, payload: { attemptId } }).catch(() => {});
  };
  const settings = { heartbeatMs: config.heartbeatMs, leaseMs: config.leaseMs, killGraceMs: config.killGraceMs, disconnectGraceMs: config.disconnectGraceMs, reportAssignments: true };
  // What reports carried, left out of heartbeats' answers (report-memory.ts); remembered longer
  // than a heartbeat is ever held (at most heartbeatMs).
  const reported = new ReportMemory(2 * config.heartbeatMs);

  app.post(
    '/v1/agent/register',
    { config: { access: 'join', audit: 'machine.register' }, schema: { summary: 'Register (or re-register) a machine by name', tags, body: RegisterRequest, response: { 200: RegisterResponse, 400: ErrorBody, 401: ErrorBody, 403: ErrorBody, 409: ErrorBody } } },
    async (req) => {
      const body = req.body as RegisterRequest;
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
      const m = await store.machineRegister({ ...body, now, credential: { id: newTokenId(now), hash: tokenHash(credential) }, audit: auditBy(req, 'machine.join', body.name) });
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
      const { id } = req.params as { id: string };
      const body = req.body as DrainSelfRequest;
      const r = await store.machineDrain({ machine: id, now: clock.now(), stopRunning: body.now === true, jitter: ctx.random(), audit: auditBy(req, 'machine.drain-self', id) });
      req.log.info({ machine: r.machine.name, machineId: id, now: body.now === true, stopped: r.stopped ?? 0 }, 'agent drains its machine');
      return { stopped: r.stopped ?? 0 };
    },
  );

  app.post(
    '/v1/agent/machines/:id/heartbeat',
    {
      config: { access: 'machine' },
      schema: {
        summary: 'Heartbeat: renew leases, learn what to kill, receive assignments (long-poll up to waitMs)',
        tags,
        params: AttemptParams,
        body: HeartbeatRequest,
        response: { 200: HeartbeatResponse, ...errors },
      },
    },
    async (req, reply) => {
      const { id } = req.params as { id: string };
      const body = req.body as HeartbeatRequest;
      const known = body.running.map((r) => r.attemptId);
      const waiter = machineWaiter(ctx.bus, id, ctx.shutdown, req.raw.socket);
      const reportedAt = clock.now();
      const arrived = reported.mark();
      try {
        // Held no longer than a heartbeat period, whatever the agent asks: the hold writes nothing,
        // so a longer one would let the machine look silent while it waits.
        const deadline = reportedAt + Math.min(body.waitMs ?? 0, config.heartbeatMs);
        // The heartbeat proper (machine alive, leases renewed, the list reconciled) is written once,
        // when the request arrives; a wake-up while it is held only re-reads what to send.
        // Under load an agent polls again each time work arrives; within half a period of the last
        // written heartbeat, one that changes nothing is only a read (see machineHeartbeat).
        const hb = await store.machineHeartbeat({
          machineId: id,
          running: body.running,
          now: reportedAt,
          leaseMs: config.leaseMs,
          missingAfterMs: 2 * config.heartbeatMs,
          jitter: ctx.random(),
          renewAfterMs: config.heartbeatMs / 2,
        });
        if (hb.lost.length) req.log.warn({ machineId: id, attempts: hb.lost }, 'running attempts no longer reported by their agent: lost');
        // What the agent knows already is not sent (report-memory.ts): a kill of an attempt whose
        // outcome it reported (`news`), nor, below, an assignment a report's answer carried since
        // this heartbeat arrived.
        const news = (k: { attemptId: string }) => !reported.hasEnded(id, k.attemptId);
        let kill = hb.kill.filter(news);
        for (;;) {
          const since = reported.offeredSince(id, arrived);
          const assignments = await store.machineAssignments({ machineId: id, exclude: since.length ? [...known, ...since] : known });
          const left = deadline - clock.now();
          if (kill.length || assignments.length || left <= 0 || ctx.shutdown.aborted || req.raw.socket.destroyed) {
            // Answered as the server stops: its connection is closed after the answer, not kept
            // alive (a connection that goes idle after the close began would hold the exit for the
            // keep-alive's 60 s).
            if (ctx.shutdown.aborted) reply.header('connection', 'close');
            return { health: hb.health, kill, assignments };
          }
          await waiter.wait(left);
          // The wake-up of a placement made in a report's transaction comes as that transaction
          // commits, before the report's answer records what it carries: let that go first.
          await new Promise((r) => setImmediate(r));
          kill = await store.machineKillList({ machineId: id, running: body.running.filter(news) });
        }
      } finally {
        waiter.done();
      }
    },
  );

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
      const { id } = req.params as { id: string };
      const body = req.body as ReportRequest;
      // Outputs are committed only if every file named was really uploaded, whole; an outcome
      // naming one that is not is refused on its own, before the transaction.
      const refused = new Map<string, ReportItemResult>();
      const problems = await missingOutputs(ctx, id, body.completed.filter((c) => isCleanExit(c) && c.outputs.length));
      for (const [attemptId, problem] of problems) refused.set(attemptId, { attemptId, result: 'refused', message: problem });
      const r = await store.machineReport({
        machineId: id,
        started: body.started,
        completed: body.completed.filter((c) => !refused.has(c.attemptId)),
        now: clock.now(),
        leaseMs: config.leaseMs,
        jitter: ctx.random,
        onItemError: (attemptId, err) => req.log.error({ machineId: id, attemptId, err }, 'report item refused: it failed'),
      });
      const stale = [...r.started, ...r.completed].filter((x) => x.result === 'stale');
      if (stale.length) req.log.warn({ machineId: id, stale }, 'stale report refused');
      const done = new Map(r.completed.map((x) => [x.attemptId, x]));
      const completed = body.completed.map((c) => refused.get(c.attemptId) ?? done.get(c.attemptId)!);
      // Recorded or not, an outcome says the process ended: no held heartbeat orders it killed.
      if (body.completed.length) reported.ended(id, body.completed.map((c) => c.attemptId), clock.now());
      // Outcomes free room, and the transaction placed what it could there: the agent asked to
      // have that now rather than on a heartbeat's answer (docs/agent.md).
      if (body.assignments && body.completed.length) {
        const assignments = await store.machineAssignments({ machineId: id, exclude: body.started.map((s) => s.attemptId) });
        reported.offered(id, assignments.map((a) => a.attemptId), clock.now());
        return { started: r.started, completed, assignments };
      }
      return { started: r.started, completed };
    },
  );

  app.post(
    '/v1/agent/attempts/:id/start',
    { config: { access: 'machine' }, schema: { summary: 'Acknowledge an assignment: the attempt is running', tags, params: AttemptParams, body: StartRequest, response: { 200: Type.Object({ state: Type.String() }), ...errors } } },
    async (req) => {
      const { id } = req.params as { id: string };
      const body = req.body as StartRequest;
      const a = await store.attemptStart({ attemptId: id, token: body.token, pid: body.pid, now: clock.now(), leaseMs: config.leaseMs, machineId: req.principal!.machineId! });
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
      const { id } = req.params as { id: string };
      const body = req.body as LogsRequest;
      const marks = await store.attemptLogAppend({ attemptId: id, token: body.token, chunks: body.chunks, now: clock.now(), machineId: req.principal!.machineId! });
      // Streams following this log read on (log-stream.ts): a hint from memory, not awaited, never stored.
      if (body.chunks.length) logsWritten(id);
      return marks;
    },
  );

  app.put(
    '/v1/agent/attempts/:id/outputs/*',
    {
      config: { access: 'machine' },
      schema: { summary: "Upload one output file into the attempt's own location (header x-gantry-token, body application/octet-stream)", tags },
      // Files are streamed to disk, never buffered, so no size limit; that is only safe for the
      // raw stream, so any other content type is refused before its parser could buffer it.
      bodyLimit: Number.MAX_SAFE_INTEGER,
      onRequest: async (req) => {
        if (!String(req.headers['content-type'] ?? '').startsWith('application/octet-stream')) {
          throw Object.assign(new Error(`content-type ${req.headers['content-type'] ?? '(none)'} is not accepted here; send application/octet-stream`), {
            statusCode: 415,
            code: 'unsupported_media_type',
          });
        }
      },
    },
    async (req, reply) => {
      const params = req.params as { id: string; '*': string };
      const token = Number(req.headers['x-gantry-token']);
      if (!Number.isInteger(token)) throw new ValidationError([{ path: 'header x-gantry-token', message: 'required, an integer' }]);
      const rel = ArtifactStore.checkPath(params['*'] ?? '');
      const machineId = req.principal!.machineId!;
      await store.attemptForUpload({ attemptId: params.id, token, machineId });
      // Into the content-addressed store, then recorded as this attempt's (fenced again: the
      // attempt may have been superseded while the file streamed); docs/rerun.md.
      const { blob, size } = await ctx.artifacts.putBlob(req.body as Readable);
      await store.outputUploaded({ attemptId: params.id, token, machineId, path: rel, blob, size, now: clock.now() });
      return reply.status(204).send();
    },
  );

  app.post(
    '/v1/agent/attempts/:id/complete',
    { config: { access: 'machine' }, schema: { summary: "Report an attempt's outcome, fenced by its token", tags, params: AttemptParams, body: CompleteRequest, response: { 200: CompleteResponse, ...errors } } },
    async (req) => {
      const { id } = req.params as { id: string };
      const body = req.body as CompleteRequest;
      // Outputs are committed only if every file named was really uploaded, whole.
      const problem = isCleanExit(body) && body.outputs.length ? (await missingOutputs(ctx, req.principal!.machineId!, [{ attemptId: id, ...body }])).get(id) : undefined;
      if (problem) throw new ValidationError([{ path: '/outputs', message: problem }]);
      const r = await store.attemptComplete({ attemptId: id, ...body, now: clock.now(), jitter: ctx.random(), machineId: req.principal!.machineId! });
      req.log.info({ attemptId: id, accepted: r.accepted, exitCode: body.exitCode, jobState: r.jobState }, 'attempt complete');
      return { accepted: r.accepted, jobState: r.jobState };
    },
  );

  app.get(
    '/v1/agent/artifacts/:id/*',
    { config: { access: 'machine' }, schema: { summary: 'Download a committed output file of an upstream attempt', tags } },
    async (req, reply) => {
      const params = req.params as { id: string; '*': string };
      const rel = ArtifactStore.checkPath(params['*'] ?? '');
      // Only outputs a stage committed are readable, never a failed or superseded attempt's
      // uploads; found through any manifest that names them, a rerun's reused stage's included,
      // so an upstream that was reused reads the same as one that ran (docs/rerun.md).
      const c = await store.committedBlob({ attemptId: params.id, path: rel });
      if (!c) throw new NotFoundError('artifact', `${params.id}/${rel}`);
      return reply.type('application/octet-stream').send(await ctx.artifacts.read(c.blob, `${params.id}/${rel}`));
    },
  );

  app.addContentTypeParser('application/octet-stream', (_req, payload, done) => done(null, payload));
}

/**
 * Why each of these outcomes' named outputs cannot be committed, by attempt (none: all were
 * uploaded whole). A file uploaded before 0014 into the attempt's own directory (an outcome
 * reported across the upgrade) is recorded as the attempt's upload where it lies.
 */
async function missingOutputs(ctx: ApiContext, machineId: string, outcomes: readonly { attemptId: string; token: number; outputs: { path: string; size: number }[] }[]): Promise<Map<string, string>> {
  const problems = new Map<string, string>();
  if (outcomes.length === 0) return problems;
  const uploads = new Map((await ctx.store.outputUploads({ attemptIds: outcomes.map((o) => o.attemptId) })).map((u) => [`${u.attemptId}\0${u.path}`, u]));
  for (const c of outcomes) {
    for (const o of c.outputs) {
      let rel: string;
      try {
        rel = ArtifactStore.checkPath(o.path);
      } catch (err) {
        problems.set(c.attemptId, errorText(err));
        break;
      }
      const u = uploads.get(`${c.attemptId}\0${rel}`);
      if (u?.size === o.size) continue;
      const legacy = u ? null : await ctx.artifacts.legacySize(c.attemptId, rel);
      if (legacy === o.size) {
        try {
          await ctx.store.outputUploaded({ attemptId: c.attemptId, token: c.token, machineId, path: rel, blob: ArtifactStore.legacyKey(c.attemptId, rel), size: legacy, now: ctx.clock.now() });
          continue;
        } catch (err) {
          problems.set(c.attemptId, `output ${o.path} cannot be recorded: ${errorText(err)}`);
          break;
        }
      }
      problems.set(c.attemptId, `output ${o.path} was not uploaded (or has ${u?.size ?? legacy} bytes, not ${o.size})`);
      break;
    }
  }
  return problems;
}
