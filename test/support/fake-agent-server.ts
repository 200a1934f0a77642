/**
 * The agent routes of a server, in memory, with a real long poll: what an Agent is run against in
 * its tests (src/agent/agent.test.ts, agent-containment.test.ts). Records every request as an
 * event; answers as the server would, or fails as told.
 */
import { EventEmitter } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type {
  AgentSettings,
  AssignmentWire,
  HeartbeatResponse,
  LogsRequest,
  ReportItemResult,
  ReportRequest,
  ReportResponse,
} from '../../src/api/contract/agent-protocol.js';

/** The fake server takes any token; an agent needs one to register at all. */
export const TEST_JOIN_TOKEN = 'gantry_join_test';

export interface Event {
  seq: number;
  /** `report`: one request; `start` and `complete`: one of its items each (`start` with pid null is the acknowledgement). */
  type: 'register' | 'heartbeat' | 'report' | 'start' | 'logs' | 'output' | 'complete';
  attemptId?: string;
  body?: any;
  /** The token the request came with. */
  auth?: string;
  /** When it arrived (Date.now()). */
  at?: number;
}

/** The agent routes of the server, in memory, with a real long poll. */
export class FakeServer {
  readonly events: Event[] = [];
  readonly machines = new Set<string>();
  readonly outputs = new Map<string, Map<string, Buffer>>();
  readonly artifacts = new Map<string, Map<string, Buffer>>();
  readonly stale = new Set<string>();
  private readonly recorded = new Set<string>();
  failHeartbeats = false;
  /** The next n heartbeats are shed: 429 heartbeat_shed with `Retry-After: shedRetryAfter` (s), as a server past its budget. */
  shedHeartbeats = 0;
  shedRetryAfter = 1;
  /** The `asOf` that heartbeats' and reports' answers say (docs/failure-detection.md, "What a heartbeat's list knows"); null: none, as older servers. */
  asOf: number | null = null;
  /** The period heartbeats' answers give (a server whose period grows with the fleet); null: none, as older servers. */
  periodMs: number | null = null;
  /** Given to an agent that registers with another token (a join token): what a server does when a machine joins. */
  credential: string | null = null;
  /** Answered 401, as a revoked token is. */
  readonly refused = new Set<string>();
  private auth = '';
  /** Reports holding an outcome are answered 503 (nothing in them recorded). */
  failCompletes = false;
  /** The next n reports holding an outcome are answered 503. */
  failCompletesTimes = 0;
  /** How long a report is held before its answer: time for more to queue behind it. */
  reportDelayMs = 0;
  /** Each outcome's answers, in order: `ok` once, then `duplicate` for a resend. */
  readonly answered = new Map<string, string[]>();
  /** Each attempt's log as taken, and how far each stream has come. */
  readonly logs = new Map<string, { stdout: string; stderr: string; at: { stdout: number; stderr: number } }>();
  /** A piece that would take an attempt's log past this many bytes is answered 503 (null: no limit). */
  logBytesTaken: number | null = null;
  url = '';
  private readonly bus = new EventEmitter();
  private queue: Pick<HeartbeatResponse, 'kill' | 'assignments'> = { kill: [], assignments: [] };
  private wake: (() => void)[] = [];
  private readonly server = http.createServer((req, res) => void this.handle(req, res));

  constructor(readonly settings: AgentSettings) {
    this.bus.setMaxListeners(100);
  }

  async listen(): Promise<void> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    for (const w of this.wake.splice(0)) w();
    this.server.closeAllConnections();
    await new Promise((r) => this.server.close(r));
  }

  /** Queues work for the next heartbeat reply and answers a held one at once. */
  push(p: { assignments?: AssignmentWire[]; kill?: HeartbeatResponse['kill'] }): void {
    this.queue.assignments.push(...(p.assignments ?? []));
    this.queue.kill.push(...(p.kill ?? []));
    for (const w of this.wake.splice(0)) w();
  }

  of(type: Event['type'], attemptId?: string): Event[] {
    return this.events.filter((e) => e.type === type && (attemptId === undefined || e.attemptId === attemptId));
  }

  waitFor(pred: (e: Event) => boolean, ms = 4000): Promise<Event> {
    const found = this.events.find(pred);
    if (found) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => {
        this.bus.off('event', on);
        reject(new Error(`no such event within ${ms} ms; saw ${this.events.map((e) => e.type).join(' ')}`));
      }, ms);
      const on = (e: Event) => {
        if (!pred(e)) return;
        clearTimeout(t);
        this.bus.off('event', on);
        resolve(e);
      };
      this.bus.on('event', on);
    });
  }

  private record(e: Omit<Event, 'seq'>): void {
    const full = { ...e, seq: this.events.length, auth: this.auth, at: Date.now() };
    this.events.push(full);
    this.bus.emit('event', full);
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks);
    const url = new URL(req.url!, 'http://x');
    const json = (status: number, body?: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(body === undefined ? undefined : JSON.stringify(body));
    };
    const staleReply = () => json(409, { error: 'stale_attempt', message: 'attempt is not current' });
    let m: RegExpExecArray | null;
    this.auth = (req.headers.authorization ?? '').replace(/^Bearer /, '');
    if (this.refused.has(this.auth)) return json(401, { error: 'unauthenticated', message: 'token was revoked' });
    if (req.method === 'POST' && url.pathname === '/v1/agent/register') {
      const id = `m_${JSON.parse(raw.toString()).name}`;
      this.machines.add(id);
      this.record({ type: 'register', body: JSON.parse(raw.toString()) });
      const joining = this.credential !== null && this.auth !== this.credential;
      return json(200, { machineId: id, settings: this.settings, ...(joining ? { credential: this.credential } : {}) });
    }
    if (req.method === 'POST' && (m = /^\/v1\/agent\/machines\/([^/]+)\/heartbeat$/.exec(url.pathname))) {
      const body = JSON.parse(raw.toString());
      this.record({ type: 'heartbeat', body });
      if (this.failHeartbeats) return json(503, { error: 'unavailable', message: 'down' });
      if (this.shedHeartbeats > 0) {
        this.shedHeartbeats--;
        res.setHeader('retry-after', String(this.shedRetryAfter));
        return json(429, { error: 'heartbeat_shed', message: 'past the budget' });
      }
      if (!this.machines.has(decodeURIComponent(m[1]!))) return json(404, { error: 'unknown_machine', message: 'who?' });
      if (this.queue.assignments.length === 0 && this.queue.kill.length === 0) {
        await new Promise<void>((r) => {
          const t = setTimeout(r, body.waitMs ?? 0);
          this.wake.push(() => (clearTimeout(t), r()));
        });
      }
      if (this.failHeartbeats) return json(503, { error: 'unavailable', message: 'down' });
      const reply = {
        health: 'ready',
        ...this.queue,
        ...(this.periodMs !== null ? { heartbeatMs: this.periodMs } : {}),
        ...(this.asOf !== null ? { asOf: this.asOf } : {}),
      };
      this.queue = { kill: [], assignments: [] };
      return json(200, reply);
    }
    if (req.method === 'POST' && (m = /^\/v1\/agent\/machines\/([^/]+)\/report$/.exec(url.pathname))) {
      const body = JSON.parse(raw.toString()) as ReportRequest;
      this.record({ type: 'report', body });
      for (const it of body.started) this.record({ type: 'start', attemptId: it.attemptId, body: { token: it.token, pid: it.pid } });
      for (const { attemptId, ...rest } of body.completed) this.record({ type: 'complete', attemptId, body: rest });
      if (!this.machines.has(decodeURIComponent(m[1]!))) return json(404, { error: 'unknown_machine', message: 'who?' });
      if (this.reportDelayMs > 0) await new Promise((r) => setTimeout(r, this.reportDelayMs));
      if (body.completed.length > 0 && (this.failCompletes || this.failCompletesTimes > 0)) {
        this.failCompletesTimes = Math.max(0, this.failCompletesTimes - 1);
        return json(503, { error: 'unavailable', message: 'database down' });
      }
      const stale = (attemptId: string): ReportItemResult | null =>
        this.stale.has(attemptId) ? { attemptId, result: 'stale', message: 'attempt is not current' } : null;
      const reply: ReportResponse = {
        started: body.started.map((it) => stale(it.attemptId) ?? { attemptId: it.attemptId, result: 'ok' }),
        completed: body.completed.map((it) => {
          const first = !this.recorded.has(it.attemptId);
          this.recorded.add(it.attemptId);
          const r: ReportItemResult = stale(it.attemptId) ?? { attemptId: it.attemptId, result: first ? 'ok' : 'duplicate', jobState: 'succeeded' };
          this.answered.set(it.attemptId, [...(this.answered.get(it.attemptId) ?? []), r.result]);
          return r;
        }),
        ...(this.asOf !== null ? { asOf: this.asOf } : {}),
      };
      return json(200, reply);
    }
    if ((m = /^\/v1\/agent\/attempts\/([^/]+)\/logs$/.exec(url.pathname))) {
      const attemptId = decodeURIComponent(m[1]!);
      const body = JSON.parse(raw.toString()) as LogsRequest;
      this.record({ type: 'logs', attemptId, body });
      if (this.stale.has(attemptId)) return staleReply();
      // As the server does (docs/agent.md, "Logs"): a piece is taken only where its stream has reached.
      const log = this.logs.get(attemptId) ?? { stdout: '', stderr: '', at: { stdout: 0, stderr: 0 } };
      this.logs.set(attemptId, log);
      for (const piece of body.chunks) {
        if (piece.offset !== log.at[piece.stream]) continue;
        // Down past the limit: what came before in this request is kept, and the agent does not learn it.
        if (this.logBytesTaken !== null && log.at.stdout + log.at.stderr + piece.bytes > this.logBytesTaken)
          return json(503, { error: 'unavailable', message: 'down' });
        log.at[piece.stream] += piece.bytes;
        log[piece.stream] += piece.data;
      }
      return json(200, { ...log.at, capped: false });
    }
    if (req.method === 'PUT' && (m = /^\/v1\/agent\/attempts\/([^/]+)\/outputs\/(.+)$/.exec(url.pathname))) {
      const attemptId = decodeURIComponent(m[1]!);
      const path = m[2]!.split('/').map(decodeURIComponent).join('/');
      this.record({ type: 'output', attemptId, body: { path, token: req.headers['x-gantry-token'] } });
      if (this.stale.has(attemptId)) return staleReply();
      if (!this.outputs.has(attemptId)) this.outputs.set(attemptId, new Map());
      this.outputs.get(attemptId)!.set(path, raw);
      return json(204);
    }
    if (req.method === 'GET' && (m = /^\/v1\/agent\/artifacts\/([^/]+)\/(.+)$/.exec(url.pathname))) {
      const path = m[2]!.split('/').map(decodeURIComponent).join('/');
      const data = this.artifacts.get(decodeURIComponent(m[1]!))?.get(path);
      if (!data) return json(404, { error: 'not_found', message: 'no such artifact' });
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      return void res.end(data);
    }
    json(404, { error: 'not_found', message: `${req.method} ${url.pathname}` });
  }
}

let assigned = 0;
/** An assignment as the fake server hands one out: `true` on no GPU, ids unique in this process under `prefix`. */
export function fakeAssignment(prefix: string, over: Partial<AssignmentWire> = {}): AssignmentWire {
  assigned++;
  return {
    attemptId: `${prefix}${process.pid}_${assigned}`,
    token: 7,
    jobId: 'job_1',
    stageName: 'train',
    attemptNumber: 1,
    command: ['true'],
    env: {},
    gpuIndices: [],
    timeoutSeconds: null,
    inputs: [],
    ...over,
  };
}
