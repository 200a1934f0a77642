/**
 * The agent's side of the agent protocol (src/api/contract/agent-protocol.ts): every call over
 * node:http(s) with keep-alive connections (a private CA with `ca`), JSON calls with their bodies
 * whole, file transfers as streams.
 *
 * Retries: calls about one attempt (logs, outputs) are retried a few times with backoff on network
 * errors, timeouts and 5xx, then the error is thrown and the agent decides whether to come back
 * later (it does for outputs, which must be delivered). A 4xx is never retried: asking again will
 * not change the answer. Heartbeats and reports are not retried here at all: the loop sends the
 * next heartbeat, and the Reporter (reporter.ts) resends a report with what has queued meanwhile.
 *
 * Timeouts: JSON calls get `requestTimeoutMs` (a heartbeat gets its long-poll wait on top). File
 * transfers get none of ours, since a large file legitimately takes long; a connection silent for
 * 300 s (STREAM_IDLE_MS) is dropped, as a dead one.
 */
import { createReadStream, createWriteStream, existsSync, mkdirSync, read, readdirSync } from 'node:fs';
import http, { type IncomingMessage } from 'node:http';
import https from 'node:https';
import { mkdir, rename, rm, type FileHandle } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type {
  AssignmentWire,
  HeartbeatRequest,
  HeartbeatResponse,
  DrainSelfResponse,
  LogsRequest,
  LogsResponse,
  RegisterRequest,
  RegisterResponse,
  ReportRequest,
  ReportResponse,
} from '../../api/contract/agent-protocol.js';
import { backoffDelay, EQUAL_JITTER } from '../../lib/backoff-delay.js';
import { errorText } from '../../lib/error-text.js';
import { retryAfterMs, retryAfterWaitMs } from '../../lib/retry-after.js';
import { serverList } from '../../lib/server-list.js';
import { sleep } from '../../lib/sleep.js';
import { checkPathSegment, checkRelativePath } from '../disk/check-relative-path.js';
import { listStageFiles, openStageFile, StageFileRefused } from '../disk/stage-tree.js';
import type { OutputLimits } from '../../domain/output-limits.js';
import { outputsOverLimit } from '../disk/outputs-over-limit.js';

export type OutputFile = { path: string; size: number };
export type LogChunk = LogsRequest['chunks'][number];

/** 409 on a call about an attempt: it is no longer current; kill it and report nothing more. */
export class StaleAttempt extends Error {
  constructor(
    readonly attemptId: string,
    message: string,
  ) {
    super(`attempt ${attemptId} is no longer current: ${message}`);
    this.name = 'StaleAttempt';
  }
}

/** 404 on a heartbeat or a report: the server does not know this machine (any more); register again. */
export class UnknownMachine extends Error {
  constructor(readonly machineId: string) {
    super(`server does not know machine ${machineId}`);
    this.name = 'UnknownMachine';
  }
}

/** A transfer that ended early or with the wrong size: worth another try. */
export class TransferError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TransferError';
  }
}

/** Any other answer that is not a success. `retryable` is true for 5xx and 429. */
export class AgentHttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** The answer's Retry-After in ms (lib/retry-after.ts), or null: the server's wait before asking again. */
    readonly retryAfterMs: number | null = null,
  ) {
    super(message);
    this.name = 'AgentHttpError';
  }
  get retryable(): boolean {
    return this.status >= 500 || this.status === 429;
  }
}

export interface RetryPolicy {
  /** Tries in all, the first included. */
  tries: number;
  baseMs: number;
  maxMs: number;
}

export interface AgentClientOptions {
  serverUrl: string;
  /** PEM of the CA that signed the server's certificate, for a private CA (https only). */
  ca?: string;
  requestTimeoutMs?: number;
  retry?: Partial<RetryPolicy>;
  /** Aborts every call in flight and every backoff wait: the agent is stopping. */
  signal?: AbortSignal;
}

/** The longest Retry-After taken as said: the protocol's longest heartbeat period (30 s). */
const MAX_RETRY_AFTER_MS = 30_000;

export const DEFAULT_RETRY: RetryPolicy = { tries: 5, baseMs: 200, maxMs: 3000 };

interface Call {
  method: string;
  path: string;
  json?: unknown;
  /** Builds a fresh body per try: a stream can be read only once. */
  body?: () => { body: NodeJS.ReadableStream; close: () => void };
  headers?: Record<string, string>;
  /** Our timeout for the call; null for none. */
  timeoutMs: number | null;
  retry: boolean;
  /** Maps 409 to StaleAttempt for this attempt. */
  attemptId?: string;
  signal?: AbortSignal;
}

export class AgentClient {
  /** The servers this agent may talk to (`--server a,b`): any replica serves it; on a failure to reach one, the next is tried. */
  private readonly bases: string[];
  private current = 0;
  private readonly timeoutMs: number;
  private readonly retry: RetryPolicy;
  private readonly signal: AbortSignal | undefined;
  /** What every call is sent with: the join token until the machine has its own credential, then that. */
  private auth: Record<string, string> = {};

  /** The token the next calls carry (docs/security.md: a join token to register, then the machine's credential). */
  setToken(token: string | null): void {
    this.auth = token ? { authorization: `Bearer ${token}` } : {};
  }

  /** Keep-alive connections for every call, with this agent's TLS settings. */
  private readonly agents: { http: http.Agent; https: https.Agent };

  constructor(opts: AgentClientOptions) {
    this.bases = serverList(opts.serverUrl);
    if (this.bases.length === 0) throw new Error('no server URL given');
    this.agents = { http: keepAlive.http, https: opts.ca ? new https.Agent({ keepAlive: true, ca: opts.ca }) : keepAlive.https };
    this.timeoutMs = opts.requestTimeoutMs ?? 10_000;
    this.retry = { ...DEFAULT_RETRY, ...opts.retry };
    this.signal = opts.signal;
  }

  async register(req: RegisterRequest, signal?: AbortSignal): Promise<RegisterResponse> {
    return this.callJson<RegisterResponse>({
      method: 'POST',
      path: '/v1/agent/register',
      json: req,
      timeoutMs: this.timeoutMs,
      retry: false,
      ...(signal ? { signal } : {}),
    });
  }

  async heartbeat(machineId: string, req: HeartbeatRequest, signal?: AbortSignal): Promise<HeartbeatResponse> {
    try {
      return await this.callJson<HeartbeatResponse>({
        method: 'POST',
        path: `/v1/agent/machines/${encodeURIComponent(machineId)}/heartbeat`,
        json: req,
        timeoutMs: (req.waitMs ?? 0) + this.timeoutMs,
        retry: false,
        ...(signal ? { signal } : {}),
      });
    } catch (err) {
      if (err instanceof AgentHttpError && err.status === 404) throw new UnknownMachine(machineId);
      throw err;
    }
  }

  /** Acknowledgements, pids and outcomes of many attempts in one request, each item answered apart. Not retried here. */
  async report(machineId: string, req: ReportRequest, signal?: AbortSignal): Promise<ReportResponse> {
    try {
      return await this.callJson<ReportResponse>({
        method: 'POST',
        path: `/v1/agent/machines/${encodeURIComponent(machineId)}/report`,
        json: req,
        timeoutMs: this.timeoutMs,
        retry: false,
        ...(signal ? { signal } : {}),
      });
    } catch (err) {
      if (err instanceof AgentHttpError && err.status === 404) throw new UnknownMachine(machineId);
      throw err;
    }
  }

  /** Drains this agent's own machine (the agent stops for good); `now` stops its stages at once. */
  async drainSelf(machineId: string, now: boolean, signal?: AbortSignal): Promise<DrainSelfResponse> {
    return this.callJson<DrainSelfResponse>({
      method: 'POST',
      path: `/v1/agent/machines/${encodeURIComponent(machineId)}/drain`,
      json: { now },
      timeoutMs: this.timeoutMs,
      retry: true,
      ...(signal ? { signal } : {}),
    });
  }

  /** Pieces of the attempt's log; answers how far the server has each stream. One try: LogTail retries. */
  async logs(attemptId: string, token: number, chunks: LogChunk[], signal?: AbortSignal): Promise<LogsResponse> {
    return this.callJson<LogsResponse>({
      method: 'POST',
      path: `/v1/agent/attempts/${encodeURIComponent(attemptId)}/logs`,
      json: { token, chunks },
      timeoutMs: this.timeoutMs,
      retry: false,
      attemptId,
      ...(signal ? { signal } : {}),
    });
  }

  /**
   * Streams one output file, `relPath` under `root`, to the attempt's output location. The file is
   * opened as stage-tree.ts opens a stage's files (never through a link, a regular file the stage
   * owns) and sent from that one handle, every try.
   */
  async uploadFile(attemptId: string, token: number, root: string, relPath: string): Promise<void> {
    const encoded = checkRelativePath(relPath).map(encodeURIComponent).join('/');
    // A file this agent cannot read (permissions, gone) is not a network fault: fail for good,
    // here, instead of inside the request where it would look like one and be retried forever.
    let fh: FileHandle;
    try {
      fh = await openStageFile(root, relPath);
    } catch (err) {
      if (err instanceof StageFileRefused) throw new OutputRefused(err);
      throw new Error(`cannot read output ${relPath}: ${errorText(err)}`);
    }
    try {
      // Its length goes first: a server whose output limits leave less refuses it before a byte is sent.
      const length = (await fh.stat()).size;
      const res = await this.call({
        method: 'PUT',
        path: `/v1/agent/attempts/${encodeURIComponent(attemptId)}/outputs/${encoded}`,
        headers: { 'x-gantry-token': String(token), 'content-type': 'application/octet-stream', 'content-length': String(length) },
        // A stream per try over the one descriptor opened (and checked) above, from its start. Its
        // destroy must not close that descriptor (a stream's destroy closes its fd whatever
        // autoClose says), or the retry after a failed try (a replica killed mid-upload) reads a
        // closed handle: closed once, in the finally below.
        body: () => {
          const s = createReadStream('', { fd: fh.fd, start: 0, autoClose: false, fs: { read, close: (_fd: number, cb: (err: null) => void) => cb(null) } });
          return { body: s, close: () => s.destroy() };
        },
        timeoutMs: null,
        retry: true,
        attemptId,
      });
      await readText(res);
    } finally {
      await fh.close();
    }
  }

  /**
   * Uploads every regular file under `dir` and returns them as the outcome names them. Anything
   * else there (a symbolic link above all: it could name any file of this machine, and the agent
   * may be root) is refused before any upload, with OutputRefused naming it: the attempt then ends
   * `outputs-failed` saying which output and why, rather than succeeding without a file its next
   * stage expects. Paths in `uploaded` with the same size are not sent again, so a delivery
   * retried after a network failure resumes rather than restarts. Over `limits` (the assignment's
   * `limits.outputs`), OutputsOverLimit before anything is sent.
   */
  async uploadOutputs(attemptId: string, token: number, dir: string, uploaded: Map<string, number> = new Map(), limits?: OutputLimits): Promise<OutputFile[]> {
    const files = await listOutputFiles(dir);
    // Over the limits, nothing is sent: the server would refuse the file that passes them, and
    // the ones before it would only fill its disk until collection.
    const over = limits ? outputsOverLimit(files, limits) : null;
    if (over !== null) throw new OutputsOverLimit(over);
    for (const f of files) {
      if (uploaded.get(f.path) === f.size) continue;
      await this.uploadFile(attemptId, token, dir, f.path);
      uploaded.set(f.path, f.size);
    }
    return files;
  }

  /** Fetches each input file to `<inputDir>/<stage>/<path>`; creates `<stage>/` even when it has no files. */
  async downloadInputs(inputs: AssignmentWire['inputs'], inputDir: string): Promise<void> {
    for (const input of inputs) {
      const stageDir = join(inputDir, checkPathSegment(input.stage));
      // Usually there already (a reused directory laid out for the same upstreams): one look, which
      // costs less than a failed mkdir (Node builds an error for it) or a trip through the thread pool.
      if (!existsSync(stageDir)) {
        try {
          mkdirSync(stageDir);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'EEXIST') await mkdir(stageDir, { recursive: true });
        }
      }
      for (const f of input.files) {
        await this.downloadArtifact(input.attemptId, f.path, join(stageDir, ...checkRelativePath(f.path)), f.size);
      }
    }
  }

  /** Downloads to a `.part` file renamed into place, so a file that exists is a whole file. */
  async downloadArtifact(fromAttemptId: string, relPath: string, dest: string, expectedSize?: number): Promise<void> {
    const encoded = checkRelativePath(relPath).map(encodeURIComponent).join('/');
    const part = `${dest}.part`;
    await mkdir(dirname(dest), { recursive: true });
    await this.withRetry(async () => {
      const res = await this.call({
        method: 'GET',
        path: `/v1/agent/artifacts/${encodeURIComponent(fromAttemptId)}/${encoded}`,
        timeoutMs: null,
        retry: false,
      });
      let bytes = 0;
      const count = new Transform({
        transform(chunk: Buffer, _enc, cb) {
          bytes += chunk.length;
          cb(null, chunk);
        },
      });
      try {
        await pipeline(res, count, createWriteStream(part), ...(this.signal ? [{ signal: this.signal }] : []));
      } catch (err) {
        await rm(part, { force: true });
        throw err;
      }
      if (expectedSize !== undefined && bytes !== expectedSize) {
        await rm(part, { force: true });
        throw new TransferError(`artifact ${fromAttemptId}/${relPath}: got ${bytes} bytes, expected ${expectedSize}`);
      }
    });
    await rename(part, dest);
  }

  private async call(c: Call): Promise<IncomingMessage> {
    return c.retry ? this.withRetry(() => this.once(c)) : this.once(c);
  }

  /** A call with a JSON body and a JSON answer: over node:http (see jsonRequest). */
  private async callJson<T>(c: Call): Promise<T> {
    const once = async () => {
      const r = await this.toServer((base) =>
        jsonRequest(base + c.path, c.method, JSON.stringify(c.json), c.timeoutMs, [this.signal, c.signal], this.auth, this.agents),
      );
      if (r.status >= 200 && r.status < 300) return JSON.parse(r.text) as T;
      throw httpError(c, r.status, r.statusText, r.text, r.retryAfter);
    };
    return c.retry ? this.withRetry(once) : once();
  }

  /** One call whose body or answer is a stream (a file), over node:http(s) as the JSON calls are. */
  private async once(c: Call): Promise<IncomingMessage> {
    const headers: Record<string, string> = { ...this.auth, ...c.headers };
    let body: NodeJS.ReadableStream | undefined;
    let close = () => {};
    if (c.body) {
      const b = c.body();
      body = b.body;
      close = b.close;
    }
    let res: IncomingMessage;
    try {
      res = await this.toServer((base) => streamRequest(base + c.path, c.method, headers, body, c.timeoutMs, [this.signal, c.signal], this.agents));
    } finally {
      close();
    }
    const status = res.statusCode ?? 0;
    if (status >= 200 && status < 300) return res;
    throw httpError(c, status, res.statusMessage ?? '', await readText(res).catch(() => ''), res.headers['retry-after']);
  }

  /** The server calls go to now (the first listed, until it fails). */
  get server(): string {
    return this.bases[this.current]!;
  }

  /**
   * Sends to the current server; if it cannot be reached (a network failure or timeout, or a
   * proxy's 502/503/504 for a replica that is down), the next call goes to the next one listed.
   * The call itself is not repeated here: its caller's retry or loop sends it again, then to the
   * next server. The server's own answers (4xx, 500) are not a reason to move.
   */
  private async toServer<T extends { status?: number; statusCode?: number }>(send: (base: string) => Promise<T>): Promise<T> {
    const at = this.current;
    try {
      const r = await send(this.bases[at]!);
      const status = r.status ?? r.statusCode ?? 0;
      if (status === 502 || status === 503 || status === 504) this.moveOn(at);
      return r;
    } catch (err) {
      if (isRetryable(err)) this.moveOn(at);
      throw err;
    }
  }

  private moveOn(from: number): void {
    // Only the first of the calls that failed together moves it on: the rest see it moved already.
    if (this.bases.length > 1 && this.current === from) this.current = (from + 1) % this.bases.length;
  }

  private async withRetry<T>(fn: () => Promise<T>): Promise<T> {
    for (let i = 1; ; i++) {
      try {
        return await fn();
      } catch (err) {
        if (i >= this.retry.tries || !isRetryable(err) || this.signal?.aborted) throw err;
        // A server that said when to come back (429, 503 with Retry-After) is not asked sooner.
        const after = err instanceof AgentHttpError && err.retryAfterMs !== null ? retryAfterWaitMs(err.retryAfterMs, Math.random()) : 0;
        await sleep(Math.max(after, backoffDelay({ ...this.retry, jitter: EQUAL_JITTER }, i, Math.random())), this.signal);
        // Stopping: the wait was cut short, and the call ends as an aborted one does, with the reason.
        if (this.signal?.aborted) throw this.signal.reason;
      }
    }
  }
}

/** The error for an answer that is not a success: the server's {error, message} when it sent one. */
function httpError(c: Call, status: number, statusText: string, text: string, retryAfter?: string): Error {
  let code = `http_${status}`;
  let message = text.slice(0, 500) || statusText;
  try {
    const e = JSON.parse(text) as { error?: unknown; message?: unknown };
    if (typeof e.error === 'string') code = e.error;
    if (typeof e.message === 'string') message = e.message;
  } catch {
    // Not JSON (a proxy's error page): the text itself is the message.
  }
  if (status === 409 && c.attemptId !== undefined) return new StaleAttempt(c.attemptId, message);
  return new AgentHttpError(status, code, `${c.method} ${c.path}: ${status} ${code}: ${message}`, retryAfterMs(retryAfter, Date.now(), MAX_RETRY_AFTER_MS));
}

/**
 * Keep-alive connections for the JSON calls. Why not fetch: under load the agent makes a few
 * hundred heartbeats and reports a second, and fetch's machinery (web streams, an AbortSignal per
 * call) cost several times what node:http does per request (measured: 8 % of the agent's time).
 */
const keepAlive = { http: new http.Agent({ keepAlive: true }), https: new https.Agent({ keepAlive: true }) };

/**
 * One JSON request. Rejects with the signal's reason when one aborts, with a
 * TimeoutError after `timeoutMs`, and with the socket's error (ECONNREFUSED, ECONNRESET, ...)
 * when the network fails (its code: isNetworkFailure), so isRetryable judges both paths alike.
 */
function jsonRequest(
  url: string,
  method: string,
  body: string,
  timeoutMs: number | null,
  signals: (AbortSignal | undefined)[],
  auth: Record<string, string>,
  agents: { http: http.Agent; https: https.Agent },
): Promise<{ status: number; statusText: string; text: string; retryAfter?: string }> {
  return new Promise((resolve, reject) => {
    const opened = openRequest(
      url,
      method,
      { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)), ...auth },
      signals,
      agents,
    );
    if ('aborted' in opened) return reject(opened.aborted);
    const { req, live, u } = opened;
    let settled = false;
    const finish = (fn: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      for (const s of live) s.removeEventListener('abort', onAbort);
      fn();
    };
    const fail = (err: unknown) => finish(() => (req.destroy(), reject(err)));
    const onAbort = function (this: AbortSignal) {
      fail(this.reason);
    };
    for (const s of live) s.addEventListener('abort', onAbort, { once: true });
    const timer =
      timeoutMs === null
        ? undefined
        : setTimeout(() => fail(new DOMException(`${method} ${u.pathname}: no answer in ${timeoutMs} ms`, 'TimeoutError')), timeoutMs);
    req.on('error', fail);
    req.on('response', (res) => {
      const parts: Buffer[] = [];
      res.on('data', (d: Buffer) => parts.push(d));
      res.on('error', fail);
      res.on('aborted', () => fail(Object.assign(new Error('the answer was cut short'), { code: 'ECONNRESET' })));
      res.on('end', () =>
        finish(() =>
          resolve({
            status: res.statusCode ?? 0,
            statusText: res.statusMessage ?? '',
            text: Buffer.concat(parts).toString('utf8'),
            ...(res.headers['retry-after'] !== undefined ? { retryAfter: res.headers['retry-after'] } : {}),
          }),
        ),
      );
    });
    req.end(body);
  });
}

/**
 * A request over the keep-alive agent of its scheme, with the signals that can still abort it; or,
 * when one has fired already, its reason (nothing is sent).
 */
function openRequest(
  url: string,
  method: string,
  headers: Record<string, string>,
  signals: (AbortSignal | undefined)[],
  agents: { http: http.Agent; https: https.Agent },
): { req: http.ClientRequest; live: AbortSignal[]; u: URL } | { aborted: unknown } {
  const live = signals.filter((s): s is AbortSignal => s !== undefined);
  const aborted = live.find((s) => s.aborted);
  if (aborted) return { aborted: aborted.reason };
  const u = new URL(url);
  const secure = u.protocol === 'https:';
  return { req: (secure ? https : http).request(u, { method, agent: secure ? agents.https : agents.http, headers }), live, u };
}

/**
 * The codes node:net, node:dns and node:http give a socket that failed: the server is down or
 * restarting, the network dropped, a name did not resolve yet (a replica's DNS entry comes with
 * it). "socket hang up" and an answer cut short (jsonRequest) carry ECONNRESET.
 */
const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENETUNREACH',
  'ENETDOWN',
  'EAI_AGAIN',
  'ENOTFOUND',
]);

/**
 * Whether the server could not be reached, by the socket's error code. Not by the error's class:
 * when calls went through fetch, any TypeError meant "fetch failed", but over node:http a TypeError
 * is a bug or a bad setting (an invalid URL, a header with a newline), which a retry repeats forever.
 */
export function isNetworkFailure(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && NETWORK_CODES.has(code);
}

/**
 * Whether a call may succeed if sent again: the server was not reached, did not answer in time, a
 * transfer broke, or the server answered 5xx/429. Anything else (4xx, an abort, a bug) is thrown.
 */
export function isRetryable(err: unknown): boolean {
  if (err instanceof AgentHttpError) return err.retryable;
  if (err instanceof TransferError) return true;
  const e = err as { name?: unknown } | null;
  if (e?.name === 'TimeoutError') return true;
  if (e?.name === 'AbortError') return false;
  return isNetworkFailure(err);
}

/** Regular files under `dir`, depth first, with '/'-separated paths relative to it; OutputRefused for anything else there. */
export async function listOutputFiles(dir: string): Promise<OutputFile[]> {
  // Most stages leave nothing: one cheap synchronous look before the walk through the thread pool.
  if (readdirSync(dir).length === 0) return [];
  try {
    return await listStageFiles(dir);
  } catch (err) {
    throw err instanceof StageFileRefused ? new OutputRefused(err) : err;
  }
}

/** Outputs over the attempt's limits (outputs-over-limit.ts says how): a fault of the stage, never retried. */
export class OutputsOverLimit extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'OutputsOverLimit';
  }
}

/** An output the agent will not upload (stage-tree.ts says why): a fault of the stage, never retried. */
export class OutputRefused extends Error {
  constructor(readonly refused: StageFileRefused) {
    super(`output ${refused.message}: only regular files the stage wrote are uploaded (copy a file into GANTRY_OUTPUT_DIR rather than link to it)`);
    this.name = 'OutputRefused';
  }
}

/**
 * A request whose body is a stream (or none), resolved with the answer's stream once its headers
 * are in. Fails as jsonRequest does (the signal's reason, a TimeoutError, the socket's error); a
 * timeout or abort after the headers destroys the answer's stream too.
 */
function streamRequest(
  url: string,
  method: string,
  headers: Record<string, string>,
  body: NodeJS.ReadableStream | undefined,
  timeoutMs: number | null,
  signals: (AbortSignal | undefined)[],
  agents: { http: http.Agent; https: https.Agent },
): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const opened = openRequest(url, method, headers, signals, agents);
    if ('aborted' in opened) return reject(opened.aborted);
    const { req, live, u } = opened;
    let answered = false;
    const fail = (err: unknown) => {
      clearTimeout(timer);
      for (const s of live) s.removeEventListener('abort', onAbort);
      req.destroy(err instanceof Error ? err : new Error(String(err)));
      if (!answered) reject(err);
    };
    const onAbort = function (this: AbortSignal) {
      fail(this.reason);
    };
    for (const s of live) s.addEventListener('abort', onAbort, { once: true });
    const timer =
      timeoutMs === null
        ? undefined
        : setTimeout(() => fail(new DOMException(`${method} ${u.pathname}: no answer in ${timeoutMs} ms`, 'TimeoutError')), timeoutMs);
    req.on('error', fail);
    // No deadline for a transfer, but a connection that says nothing for this long is dead.
    req.setTimeout(STREAM_IDLE_MS, () => fail(new DOMException(`${method} ${u.pathname}: silent for ${STREAM_IDLE_MS / 1000} s`, 'TimeoutError')));
    req.on('response', (res) => {
      answered = true;
      res.once('end', () => {
        clearTimeout(timer);
        for (const s of live) s.removeEventListener('abort', onAbort);
      });
      resolve(res);
    });
    if (body) {
      body.on('error', fail);
      body.pipe(req);
    } else req.end();
  });
}

const STREAM_IDLE_MS = 300_000;

async function readText(res: IncomingMessage): Promise<string> {
  const parts: Buffer[] = [];
  for await (const d of res) parts.push(d as Buffer);
  return Buffer.concat(parts).toString('utf8');
}
