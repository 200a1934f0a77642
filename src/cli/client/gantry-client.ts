import { followEvents, type FollowOptions } from './event-stream.js';
import { followSse } from './sse-stream.js';
import type { LogFollowEnd } from '../../api/contract/log-follow.js';
import type { TeamChangeRequest, TeamCreateRequest, TeamView } from '../../api/contract/team-view.js';
import { randomUUID } from 'node:crypto';
import type { JobBatchResult } from '../../api/contract/job-batch.js';
import type { EventView, JobSummaryView, JobView, LogChunkView, MachineChange, MachineView, StageExplanation } from '../../api/contract/job-view.js';
import type { AuditView } from '../../api/contract/audit-view.js';
import type { PoolsView } from '../../api/contract/pool-view.js';
import type { AutoscaleView } from '../../api/contract/autoscale-view.js';
import type { CollectionView } from '../../api/contract/artifacts-view.js';
import type { RerunRequest, RerunResult } from '../../api/contract/rerun.js';
import type { TokenCreated, TokenCreateRequest, TokenView } from '../../api/contract/token-view.js';
import { ApiError, errorBodyOf } from './api-error.js';
import { httpCall, UNTRUSTED_CERTIFICATE, type HttpAnswer } from './http-call.js';
import { ConnectionError } from './connection-error.js';
import { backoffDelay } from '../../lib/backoff-delay.js';
import { serverList } from '../../lib/server-list.js';
import { sleep } from '../../lib/sleep.js';
import { errorText } from '../../lib/error-text.js';

export { ApiError } from './api-error.js';
export { ConnectionError } from './connection-error.js';

export type LogChunk = LogChunkView;

export interface JobListQuery {
  state?: string;
  team?: string;
  /** Jobs whose name holds this text, in any case. */
  name?: string;
  limit?: number;
  /** The page after this job id. */
  before?: string;
}

export type MachineAction = 'cordon' | 'uncordon' | 'drain' | 'remove';

export interface LogQuery {
  attempt?: number;
  /** A gang's member (default 0), or every member's interleaved (docs/gangs.md). */
  rank?: number | 'all';
  after?: number;
}

// Long enough for a busy server under a big submit; short enough that a hung one is noticed.
const REQUEST_TIMEOUT_MS = 30_000;

/** Tries of a request answered 429 (too many), each after the wait the server asked for. */
const RATE_LIMITED_TRIES = 4;

/** How long a live stream keeps trying to reconnect to a server it cannot reach (servers restart). */
const STREAM_RECONNECT_MS = 60_000;

/** Tries of a submit, over about 8 s, when the server cannot be reached (a restart, say). */
const SUBMIT_TRIES = 6;
/** Between a submit's tries: 250 ms doubling to 4 s, without jitter. */
const SUBMIT_BACKOFF = { baseMs: 250, maxMs: 4000 };

/** The Gantry HTTP API as the CLI uses it. Speaks only the wire contract (api/contract). */
export class GantryClient {
  /** The server in use: the first of `--server a,b,…` that answered. */
  get baseUrl(): string {
    return this.servers[this.current]!;
  }
  private readonly servers: string[];
  private current = 0;
  private readonly timeoutMs: number;
  private readonly auth: Record<string, string>;
  private readonly ca: string | undefined;

  /** `token`: sent with every request as `Authorization: Bearer` (docs/security.md); `ca`: PEM of a private CA to trust. */
  constructor(baseUrl: string, opts: { token?: string | null; timeoutMs?: number; ca?: string } = {}) {
    this.servers = serverList(baseUrl);
    if (this.servers.length === 0) throw new Error('no server URL given (--server or $GANTRY_SERVER)');
    this.timeoutMs = opts.timeoutMs ?? REQUEST_TIMEOUT_MS;
    this.auth = opts.token ? { authorization: `Bearer ${opts.token}` } : {};
    this.ca = opts.ca;
  }

  /** One job. Sent with a fresh Idempotency-Key and retried with it when the server could not be
   *  reached or did not answer: a submit that was done before its answer got lost is not done twice. */
  submit(spec: unknown, opts: { strict?: boolean } = {}): Promise<JobView> {
    return this.idempotent(`/v1/jobs${opts.strict ? '?strict=true' : ''}`, spec);
  }

  /** Many jobs in one request, all or none: their ids and names, in the order given (retried as submit is). */
  submitBatch(specs: readonly unknown[], opts: { strict?: boolean } = {}): Promise<JobBatchResult> {
    return this.idempotent(`/v1/jobs/batch${opts.strict ? '?strict=true' : ''}`, { jobs: specs });
  }

  private async idempotent<T>(path: string, body: unknown): Promise<T> {
    const headers = { 'idempotency-key': randomUUID() };
    for (let attempt = 1; ; attempt++) {
      try {
        return JSON.parse((await this.request('POST', path, body, headers)).text) as T;
      } catch (err) {
        const retryable = err instanceof ConnectionError || (err instanceof ApiError && [502, 503, 504].includes(err.status));
        if (!retryable || attempt >= SUBMIT_TRIES) throw err;
        await sleep(backoffDelay(SUBMIT_BACKOFF, attempt));
      }
    }
  }

  /**
   * A rerun (docs/rerun.md): the plan and the new job. Sent with a fresh Idempotency-Key and
   * retried with it as submit is, so a rerun whose answer was lost is not made twice; a dry run
   * writes nothing and needs none.
   */
  rerun(id: string, req: RerunRequest): Promise<RerunResult> {
    const path = `/v1/jobs/${enc(id)}/rerun`;
    return req.dryRun ? this.json('POST', path, req) : this.idempotent(path, req);
  }

  /** Artifact collection now, or what it would do (admin). */
  collectArtifacts(opts: { dryRun?: boolean } = {}): Promise<CollectionView> {
    return this.json('POST', '/v1/artifacts/gc', { dryRun: opts.dryRun === true });
  }

  getJob(id: string): Promise<JobView> {
    return this.json('GET', `/v1/jobs/${enc(id)}`);
  }

  explainStage(id: string, stage: string): Promise<StageExplanation> {
    return this.json('GET', `/v1/jobs/${enc(id)}/stages/${enc(stage)}/explain`);
  }

  async listJobs(q: JobListQuery = {}): Promise<JobSummaryView[]> {
    const r = await this.json<{ jobs: JobSummaryView[] }>(
      'GET',
      `/v1/jobs${query({ state: q.state, team: q.team, name: q.name, limit: q.limit, before: q.before })}`,
    );
    return r.jobs;
  }

  deleteJob(id: string): Promise<{ deleted: string; attempts: number }> {
    return this.json('DELETE', `/v1/jobs/${enc(id)}`);
  }

  /** One committed output file of a stage, as bytes. */
  async output(id: string, stage: string, path: string): Promise<Buffer> {
    const rel = path.split('/').map(enc).join('/');
    return (await this.request('GET', `/v1/jobs/${enc(id)}/stages/${enc(stage)}/outputs/${rel}`)).bytes;
  }

  cancel(id: string): Promise<{ changed: boolean; job: JobView }> {
    return this.json('POST', `/v1/jobs/${enc(id)}/cancel`);
  }

  /** The stage's log as text (the latest attempt unless `attempt` is given). */
  async logs(id: string, stage: string, q: LogQuery = {}): Promise<string> {
    const res = await this.request('GET', `${logPath(id, stage)}${query({ attempt: q.attempt, rank: q.rank, after: q.after })}`);
    return res.text;
  }

  /** The stage's log as chunks with ids, for following with `after`. */
  async logChunks(id: string, stage: string, q: LogQuery = {}): Promise<LogChunk[]> {
    const r = await this.json<{ chunks: LogChunk[] }>(
      'GET',
      `${logPath(id, stage)}${query({ attempt: q.attempt, rank: q.rank, after: q.after, format: 'json' })}`,
    );
    return r.chunks;
  }

  /**
   * Follows a stage's log live (`…/logs?follow=1`, server-sent events; contract/log-follow.ts):
   * each new chunk to `onChunk`, once, until the log is complete. Resolves with the stream's `end`,
   * null when `signal` aborted, or 'not-a-stream' from a server without the stream. A connection
   * that drops is opened again after the last chunk got; after a minute without one it gives up.
   */
  async followLog(
    id: string,
    stage: string,
    q: LogQuery,
    opts: { signal: AbortSignal; onChunk: (c: LogChunk) => void; onDrop?: (why: string) => void },
  ): Promise<LogFollowEnd | null | 'not-a-stream'> {
    let end: LogFollowEnd | null = null;
    const outcome = await followSse({
      url: `${this.baseUrl}${logPath(id, stage)}${query({ attempt: q.attempt, rank: q.rank, after: q.after, follow: 1 })}`,
      headers: this.auth,
      ...(this.ca ? { ca: this.ca } : {}),
      signal: opts.signal,
      giveUpAfterMs: STREAM_RECONNECT_MS,
      ...(opts.onDrop ? { onDrop: opts.onDrop } : {}),
      onMessage: (m) => {
        if (m.event === 'end') {
          end = JSON.parse(m.data) as LogFollowEnd;
          return false;
        }
        if (m.event === 'chunk') opts.onChunk(JSON.parse(m.data) as LogChunk);
      },
    });
    return outcome === 'not-a-stream' ? outcome : end;
  }

  async events(id: string, after?: number): Promise<EventView[]> {
    const r = await this.json<{ events: EventView[] }>('GET', `/v1/jobs/${enc(id)}/events${query({ after })}`);
    return r.events;
  }

  async machines(): Promise<MachineView[]> {
    const r = await this.json<{ machines: MachineView[] }>('GET', '/v1/machines');
    return r.machines;
  }

  /** One machine, by name or id. */
  machine(ref: string): Promise<MachineView> {
    return this.json('GET', `/v1/machines/${enc(ref)}`);
  }

  /** An operator's verb on a machine (name or id); `changed: false` when it already was as asked. */
  /** `now`: drain only: stop what runs there at once. */
  machineAction(ref: string, action: MachineAction, opts: { now?: boolean } = {}): Promise<MachineChange> {
    if (action === 'remove') return this.json('DELETE', `/v1/machines/${enc(ref)}`);
    return this.json('POST', `/v1/machines/${enc(ref)}/${action}${action === 'drain' && opts.now ? '?now=true' : ''}`);
  }

  /** Follows the live event stream (docs in event-stream.ts); resolves when `signal` aborts or `onEvent` returns false. */
  followEvents(query: { job?: string; team?: string; pool?: string; after?: number }, opts: Omit<FollowOptions, 'url' | 'headers' | 'ca'>): Promise<void> {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== undefined) q.set(k, String(v));
    const qs = q.toString();
    return followEvents({ ...opts, url: `${this.baseUrl}/v1/events${qs ? `?${qs}` : ''}`, headers: this.auth, ...(this.ca ? { ca: this.ca } : {}) });
  }

  createTeam(req: TeamCreateRequest): Promise<TeamView> {
    return this.json('POST', '/v1/teams', req);
  }

  changeTeam(name: string, req: TeamChangeRequest): Promise<TeamView> {
    return this.json('PATCH', `/v1/teams/${enc(name)}`, req);
  }

  /** Every pool now (`cpu`, `gpu:h100`, …): those machines serve and those stages queue in. */
  pools(): Promise<PoolsView> {
    return this.json('GET', '/v1/pools');
  }

  /** The autoscaled pools, the machines the autoscaler started and its latest decisions (docs/autoscaling.md). */
  autoscale(): Promise<AutoscaleView> {
    return this.json('GET', '/v1/autoscale');
  }

  async teams(): Promise<TeamView[]> {
    return (await this.json<{ teams: TeamView[] }>('GET', '/v1/teams')).teams;
  }

  team(name: string): Promise<TeamView> {
    return this.json('GET', `/v1/teams/${enc(name)}`);
  }

  createToken(req: TokenCreateRequest): Promise<TokenCreated> {
    return this.json('POST', '/v1/tokens', req);
  }

  async tokens(opts: { all?: boolean } = {}): Promise<TokenView[]> {
    const r = await this.json<{ tokens: TokenView[] }>('GET', `/v1/tokens${query({ all: opts.all ? 'true' : undefined })}`);
    return r.tokens;
  }

  revokeToken(id: string): Promise<{ changed: boolean; token: TokenView }> {
    return this.json('DELETE', `/v1/tokens/${enc(id)}`);
  }

  async audit(q: { after?: number; since?: string; limit?: number } = {}): Promise<AuditView[]> {
    const r = await this.json<{ entries: AuditView[] }>('GET', `/v1/audit${query({ after: q.after, since: q.since, limit: q.limit })}`);
    return r.entries;
  }

  health(): Promise<{ ok: boolean; version?: string }> {
    return this.json('GET', '/healthz');
  }

  private async json<T>(method: string, path: string, body?: unknown): Promise<T> {
    const res = await this.request(method, path, body);
    return JSON.parse(res.text) as T;
  }

  /** Too many requests (429): waits as long as the server says, a few times, then gives up with its answer. */
  private async request(method: string, path: string, body?: unknown, extra: Record<string, string> = {}): Promise<HttpAnswer> {
    for (let tries = 1; ; tries++) {
      try {
        return await this.requestOnce(method, path, body, extra);
      } catch (err) {
        if (!(err instanceof ApiError) || err.status !== 429 || tries >= RATE_LIMITED_TRIES) throw err;
        await sleep(Math.min(30, err.retryAfter ?? 1) * 1000);
      }
    }
  }

  /**
   * To the current server; when it cannot be reached at all (nothing listens, no route: the
   * request never arrived, so sending it elsewhere cannot do it twice), to the next one listed.
   */
  private async requestOnce(method: string, path: string, body: unknown, extra: Record<string, string>): Promise<HttpAnswer> {
    const failures: ConnectionError[] = [];
    for (let i = 0; i < this.servers.length; i++) {
      try {
        return await this.requestTo(this.baseUrl, method, path, body, extra);
      } catch (err) {
        if (!(err instanceof ConnectionError) || !NEVER_ARRIVED.has(err.code ?? '') || this.servers.length === 1) throw err;
        failures.push(err);
        this.current = (this.current + 1) % this.servers.length;
      }
    }
    throw new ConnectionError(this.servers.join(', '), failures.map((f) => `${f.baseUrl}: ${f.causeText}`).join('; '), failures[0]?.code);
  }

  private async requestTo(base: string, method: string, path: string, body: unknown, extra: Record<string, string>): Promise<HttpAnswer> {
    const url = base + path;
    let res: HttpAnswer;
    try {
      res = await httpCall(url, {
        method,
        headers: body === undefined ? { ...this.auth, ...extra } : { 'content-type': 'application/json', ...this.auth, ...extra },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        timeoutMs: this.timeoutMs,
        ...(this.ca ? { ca: this.ca } : {}),
      });
    } catch (e) {
      const code = (e as { code?: string }).code;
      if (code && UNTRUSTED_CERTIFICATE.has(code)) {
        throw new ConnectionError(
          base,
          `the server's certificate is not trusted (${code}: ${errorText(e)}); give the CA that signed it with --ca FILE or $GANTRY_CA`,
          code,
        );
      }
      throw new ConnectionError(base, describeFailure(e, this.timeoutMs), code);
    }
    if (res.status < 200 || res.status >= 300) throw new ApiError(res.status, errorBodyOf(res.status, res.statusText, res.text), res.retryAfter);
    return res;
  }
}

/** Failures that mean the request never reached a server, so another may take it. */
const NEVER_ARRIVED = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);

function enc(segment: string): string {
  return encodeURIComponent(segment);
}

function logPath(id: string, stage: string): string {
  return `/v1/jobs/${enc(id)}/stages/${enc(stage)}/logs`;
}

function query(params: Record<string, string | number | undefined>): string {
  const qs = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined) qs.set(k, String(v));
  const s = qs.toString();
  return s ? `?${s}` : '';
}

/** A network failure as a person reads it: its code (ECONNREFUSED, ENOTFOUND) and message. */
function describeFailure(e: unknown, timeoutMs: number): string {
  if (e instanceof Error && (e.name === 'TimeoutError' || e.name === 'AbortError')) return `no answer within ${timeoutMs / 1000}s`;
  if (e instanceof Error) {
    const code = (e as Error & { code?: string }).code;
    return code && !e.message.includes(code) ? `${code}: ${e.message}` : e.message;
  }
  return String(e);
}
