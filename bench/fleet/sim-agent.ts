import type { Static } from 'typebox';
import type {
  AgentSettings,
  AssignmentWire,
  CompletedItem,
  HeartbeatResponse,
  RegisterRequest,
  RegisterResponse,
  ReportResponse,
  StartedItem,
} from '../../src/api/contract/agent-protocol.js';
import { retryAfterWaitMs } from '../../src/lib/retry-after.js';
import { HttpError, type JsonClient } from './json-client.js';

export type Assignment = Static<typeof AssignmentWire>;
type Settings = Static<typeof AgentSettings>;

/** What a fleet learns from its agents, as it happens (fleet.ts keeps the figures). */
export interface AgentObserver {
  /** A heartbeat answered: its round trip, the hold it asked for, whether it brought nothing (then it was held the whole `waitMs`), and its parts on one clock when the server timed it. */
  heartbeat(agent: SimAgent, rttMs: number, waitMs: number, empty: boolean, split: HeartbeatSplit | null): void;
  /** An assignment taken (each attempt id once per agent). */
  assigned(agent: SimAgent, a: Assignment): void;
  /** An acknowledgement answered `ok` or `duplicate`: the stage "runs" from now. */
  started(agent: SimAgent, a: Assignment): void;
  /** An outcome answered (`ok`, `duplicate`, `stale` or `refused`). */
  completed(agent: SimAgent, a: Assignment, result: string): void;
  /** A request that failed (the agent retries after a backoff, as the real one does). */
  failed(agent: SimAgent, what: 'heartbeat' | 'report', err: unknown): void;
}

export interface SimAgentOptions {
  /** The server this agent speaks to (a replica, with two). */
  server: string;
  name: string;
  cpuMillis: number;
  memoryBytes: number;
  joinToken: string;
  client: JsonClient;
  observer: AgentObserver;
  /** How long a stage "runs" after its acknowledgement is answered. */
  runMs: (a: Assignment) => number;
  /** An agent from before the period grew with the fleet: it ignores the answer's heartbeatMs. */
  old?: boolean;
}

/**
 * One heartbeat's round trip in parts, on the host's one clock (ms): the agent's send to the
 * server's read of it (`inMs`), that read to the handler's start (`preMs`: body, authentication,
 * validation), the handler's start to the answer handed to the socket less the hold (`serverOverMs`:
 * the deadline's timer late, the reads, the serialising), and that to the agent's read of the whole
 * answer (`backMs`). Their sum is the round trip less the hold.
 */
export interface HeartbeatSplit {
  inMs: number;
  preMs: number;
  serverOverMs: number;
  backMs: number;
}

/** The split of a heartbeat held `heldMs`, from the server's `x-gantry-timing` (read;handler;sent) and the agent's own times; null when the server sent none. */
export function heartbeatSplit(timing: string | null, sentAt: number, readAt: number, heldMs: number): HeartbeatSplit | null {
  if (!timing) return null;
  const [read, handler, sent] = timing.split(';').map(Number);
  if (![read, handler, sent].every((x) => Number.isFinite(x))) return null;
  return { inMs: read! - sentAt, preMs: handler! - read!, serverOverMs: sent! - handler! - heldMs, backMs: readAt - sent! };
}

type Held = { a: Assignment; phase: 'acking' | 'running' | 'owed'; timer?: NodeJS.Timeout };

/**
 * One simulated agent: the real agent's protocol (docs/agent.md) without a process, a journal or
 * a launcher. It registers with a join token and speaks with the credential it gets from then on;
 * heartbeats back to back, each a long poll held up to the settings' `heartbeatMs` and naming every
 * attempt it answers for; keeps one batched report in flight (acknowledgements and outcomes, what
 * comes meanwhile goes into the next, outcomes asking for the assignments they make room for
 * where the server offers it); spawns nothing: an acknowledged stage "ends" with exit 0 after
 * `runMs`. Kills are obeyed at once (nothing to signal). Not simulated: pid items (the real agent
 * sends one a second after a spawn, never for a stage whose outcome comes first), logs, outputs,
 * the 10 ms wait for items about to join a report, and registering again after a 404.
 */
export class SimAgent {
  machineId = '';
  /** Heartbeats answered so far. */
  heartbeats = 0;
  private credential = '';
  settings: Settings | null = null;
  /** The heartbeat period it keeps to now: the settings', then what each answer gives. */
  periodMs = 0;
  private readonly held = new Map<string, Held>();
  private readonly toAck: Held[] = [];
  private readonly toComplete: Held[] = [];
  private wakeReporter: (() => void) | null = null;
  private readonly abort = new AbortController();
  private stopped = false;
  private loops: Promise<void>[] = [];

  constructor(readonly o: SimAgentOptions) {}

  /** Killed (kill()): sends nothing more. */
  get dead(): boolean {
    return this.stopped;
  }

  get name(): string {
    return this.o.name;
  }

  /** Attempts this agent answers for (acknowledging, running, or owing an outcome). */
  get holding(): number {
    return this.held.size;
  }

  /** Attempts acknowledged and "running" (their outcome not yet due). */
  get running(): number {
    let n = 0;
    for (const h of this.held.values()) if (h.phase === 'running') n++;
    return n;
  }

  /** The attempts this agent answers for now. */
  attempts(): Assignment[] {
    return [...this.held.values()].map((h) => h.a);
  }

  private url(path: string): URL {
    return new URL(path, this.o.server);
  }

  async register(): Promise<void> {
    const body: Static<typeof RegisterRequest> = {
      name: this.o.name,
      cpuMillis: this.o.cpuMillis,
      memoryBytes: this.o.memoryBytes,
      gpus: [],
      gpusDeclared: false,
      region: null,
      labels: {},
      agent: { version: 'fleet-sim', host: this.o.name, pid: process.pid },
    };
    // As the real agent: a failure a retry can fix (no answer, 5xx, 429) is tried again after a backoff.
    let res: Static<typeof RegisterResponse> | undefined;
    for (let tries = 1; !res; tries++) {
      try {
        res = await this.o.client.post<Static<typeof RegisterResponse>>(this.url('/v1/agent/register'), body, this.o.joinToken, this.abort.signal);
      } catch (err) {
        const retryable = err instanceof HttpError && (err.status === 0 || err.status >= 500 || err.status === 429);
        if (!retryable || tries >= 10 || this.stopped) throw err;
        await this.pause(Math.min(5000, 100 * 2 ** tries));
      }
    }
    if (!res.credential) throw new Error(`${this.o.name}: registered without a credential`);
    this.machineId = res.machineId;
    this.credential = res.credential;
    this.settings = res.settings;
    this.periodMs = res.settings.heartbeatMs;
  }

  /** Starts heartbeating and reporting; `delayMs` staggers the first heartbeat, as agents started at different times are. */
  start(delayMs: number): void {
    if (!this.settings) throw new Error(`${this.o.name}: start before register`);
    this.loops = [this.heartbeatLoop(delayMs), this.reportLoop()];
  }

  /** Stops at once, as a machine that dies: in-flight requests are cut (the server sees the connections close), nothing more is sent. */
  async kill(): Promise<void> {
    this.stopped = true;
    this.abort.abort();
    for (const h of this.held.values()) clearTimeout(h.timer);
    this.wakeReporter?.();
    await Promise.allSettled(this.loops);
  }

  private pause(ms: number): Promise<void> {
    return new Promise((r) => {
      if (this.stopped || ms <= 0) return r();
      const onAbort = () => (clearTimeout(t), r());
      const t = setTimeout(() => (this.abort.signal.removeEventListener('abort', onAbort), r()), ms);
      this.abort.signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Assignments from either answer, each attempt taken once (the real agent's directory check). */
  private take(assignments: Assignment[]): void {
    for (const a of assignments) {
      if (this.held.has(a.attemptId)) continue;
      const h: Held = { a, phase: 'acking' };
      this.held.set(a.attemptId, h);
      this.toAck.push(h);
      this.o.observer.assigned(this, a);
    }
    if (this.toAck.length) this.wakeReporter?.();
  }

  private async heartbeatLoop(delayMs: number): Promise<void> {
    await this.pause(delayMs);
    const path = this.url(`/v1/agent/machines/${this.machineId}/heartbeat`);
    let failures = 0;
    while (!this.stopped) {
      const running = [...this.held.values()].map((h) => ({ attemptId: h.a.attemptId, token: h.a.token }));
      const t0 = performance.now();
      // As the real agent: the period the last answer gave (it grows with the fleet), else the
      // settings'; an agent that predates it (--old-agents) keeps to the settings'.
      const periodMs = this.periodMs;
      try {
        // As the real agent: it honours Retry-After, and says so to a server that sheds (not --old-agents).
        const body = { running, waitMs: periodMs, ...(!this.o.old && this.settings?.shedding ? { acceptsShedding: true } : {}) };
        const r = await this.o.client.postTimed<Static<typeof HeartbeatResponse>>(path, body, this.credential, this.abort.signal);
        const res = r.body;
        const rtt = performance.now() - t0;
        failures = 0;
        this.heartbeats++;
        if (!this.o.old && res.heartbeatMs !== undefined) this.periodMs = res.heartbeatMs;
        const empty = res.kill.length === 0 && res.assignments.length === 0;
        // Held the whole period it asked for, or the server's, if shorter.
        const held = Math.min(periodMs, res.heartbeatMs ?? periodMs);
        this.o.observer.heartbeat(this, rtt, held, empty, empty ? heartbeatSplit(r.timing, r.sentAt, r.readAt, held) : null);
        for (const k of res.kill) this.drop(k.attemptId);
        this.take(res.assignments);
        // As the real agent: a server that answers at once with nothing is not long-polling; keep to the period.
        if (empty) await this.pause(held - rtt);
      } catch (err) {
        if (this.stopped) break;
        this.o.observer.failed(this, 'heartbeat', err);
        // As the real agent: a shed heartbeat's Retry-After is waited out (jittered) and is no failure.
        if (!this.o.old && err instanceof HttpError && err.code === 'heartbeat_shed' && err.retryAfterMs !== null) {
          await this.pause(retryAfterWaitMs(err.retryAfterMs, Math.random()));
          continue;
        }
        failures++;
        const after = !this.o.old && err instanceof HttpError && err.retryAfterMs !== null ? retryAfterWaitMs(err.retryAfterMs, Math.random()) : 0;
        await this.pause(Math.max(after, Math.min(periodMs, 100 * 2 ** failures)));
      }
    }
  }

  /** The server said kill: nothing runs, so the attempt is simply forgotten (and no longer listed). */
  private drop(attemptId: string): void {
    const h = this.held.get(attemptId);
    if (!h) return;
    clearTimeout(h.timer);
    this.held.delete(attemptId);
  }

  private async reportLoop(): Promise<void> {
    const s = this.settings!;
    const path = this.url(`/v1/agent/machines/${this.machineId}/report`);
    let failures = 0;
    let retry: { acks: Held[]; outs: Held[] } = { acks: [], outs: [] };
    while (!this.stopped) {
      if (retry.acks.length + retry.outs.length + this.toAck.length + this.toComplete.length === 0) {
        await new Promise<void>((r) => (this.wakeReporter = r));
        this.wakeReporter = null;
        continue;
      }
      // Items of a request that failed go first, with whatever queued meanwhile; dropped ones are left out.
      const acks = [...retry.acks, ...this.toAck.splice(0)].filter((h) => this.held.get(h.a.attemptId) === h);
      const outs = [...retry.outs, ...this.toComplete.splice(0)].filter((h) => this.held.get(h.a.attemptId) === h);
      retry = { acks: [], outs: [] };
      if (acks.length + outs.length === 0) continue;
      const started: Static<typeof StartedItem>[] = acks.map((h) => ({ attemptId: h.a.attemptId, token: h.a.token, pid: null }));
      const completed: Static<typeof CompletedItem>[] = outs.map((h) => ({
        attemptId: h.a.attemptId,
        token: h.a.token,
        exitCode: 0,
        signal: null,
        reason: null,
        outputs: [],
        ...((s.protocol ?? 1) >= 2 ? { end: { kind: 'exited' as const, detail: null } } : {}),
      }));
      const ask = completed.length > 0 && s.reportAssignments === true;
      try {
        const res = await this.o.client.post<Static<typeof ReportResponse>>(
          path,
          ask ? { started, completed, assignments: true } : { started, completed },
          this.credential,
          this.abort.signal,
        );
        failures = 0;
        for (const r of res.started) {
          const h = this.held.get(r.attemptId);
          if (!h || h.phase !== 'acking') continue;
          if (r.result === 'ok' || r.result === 'duplicate') {
            h.phase = 'running';
            this.o.observer.started(this, h.a);
            h.timer = setTimeout(() => {
              h.phase = 'owed';
              this.toComplete.push(h);
              this.wakeReporter?.();
            }, this.o.runMs(h.a));
          } else this.held.delete(r.attemptId);
        }
        for (const r of res.completed) {
          const h = this.held.get(r.attemptId);
          if (!h) continue;
          this.held.delete(r.attemptId);
          this.o.observer.completed(this, h.a, r.result);
        }
        this.take(res.assignments ?? []);
      } catch (err) {
        if (this.stopped) break;
        this.o.observer.failed(this, 'report', err);
        // A refusal a retry cannot change (a 4xx other than 429) drops the items, as the agent gives up on them.
        if (err instanceof HttpError && err.status >= 400 && err.status < 500 && err.status !== 429) {
          for (const h of [...acks, ...outs]) this.held.delete(h.a.attemptId);
          continue;
        }
        retry = { acks, outs };
        failures++;
        await this.pause(Math.min(3000, 100 * 2 ** failures));
      }
    }
  }
}
