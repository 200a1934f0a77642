import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Assignment } from './sim-agent.js';
import type { FleetLike, FleetOptions, FleetWindow, Taken } from './fleet.js';

/** What a fleet process is asked (fleet-proc.ts), each with an id its answer carries back. */
export type ProcRequest =
  | { type: 'start'; o: Omit<FleetOptions, 'onTaken'> }
  | { type: 'settled'; n: number; timeoutMs: number }
  | { type: 'window' }
  | { type: 'runningOf'; names: string[] }
  | { type: 'kill'; names: string[] }
  | { type: 'stop' };

/** What a fleet process says: an answer to a request (or its error), or an assignment taken, its time on the host's clock. */
export type ProcMessage =
  | { type: 'answer'; id: number; value?: unknown; error?: string; counters: Counters }
  | { type: 'taken'; agent: string; machineId: string; a: Assignment; atHost: number };

/** A fleet process's running totals. */
export interface Counters {
  retried: number;
  shed: number;
  errors: string[];
}

/**
 * A fleet spread over `procs` processes (`--fleet-procs`), each holding its share of the agents
 * (fleet-proc.ts: a `Fleet` of its own, agents numbered on from the share before it), so that no
 * single event loop answers for all of them: with 10,000 agents in one process, that process's own
 * lateness is in every heartbeat it times (docs/throughput.md, "Where a heartbeat's time goes, on
 * one clock"). Assignments come back as they are taken, their times moved to this process's clock;
 * the figures of a window are every process's heartbeats together, and its event-loop delay the
 * worst process's.
 */
export class ProcFleet implements FleetLike {
  readonly taken: Taken[] = [];
  errors: string[] = [];
  retried = 0;
  shed = 0;
  private readonly children: ChildProcess[] = [];
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private readonly counters: Counters[] = [];
  private nextId = 0;

  constructor(
    readonly o: FleetOptions,
    readonly procs: number,
  ) {
    if (!Number.isInteger(procs) || procs < 1) throw new Error(`--fleet-procs takes a whole number of processes, 1 or more; got ${procs}`);
  }

  get pids(): number[] {
    return this.children.map((c) => c.pid!).filter((p) => p !== undefined);
  }

  private ask<T>(i: number, req: ProcRequest): Promise<T> {
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.children[i]!.send({ id, ...req });
    });
  }

  private all<T>(req: (i: number) => ProcRequest): Promise<T[]> {
    return Promise.all(this.children.map((_c, i) => this.ask<T>(i, req(i))));
  }

  async start(): Promise<void> {
    const entry = fileURLToPath(new URL('./fleet-proc.ts', import.meta.url));
    const share = (i: number) => Math.floor((this.o.count * (i + 1)) / this.procs) - Math.floor((this.o.count * i) / this.procs);
    for (let i = 0; i < this.procs; i++) {
      const child = fork(entry, [], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      this.counters.push({ retried: 0, shed: 0, errors: [] });
      child.on('message', (m: ProcMessage) => this.heard(i, m));
      child.on('exit', (code, signal) => {
        for (const p of this.pending.values()) p.reject(new Error(`fleet process ${i + 1} exited (${code ?? signal})`));
        this.pending.clear();
      });
      this.children.push(child);
    }
    const { onTaken: _, ...o } = this.o;
    await this.all((i) => ({
      type: 'start',
      o: {
        ...o,
        count: share(i),
        offset: (o.offset ?? 0) + Math.floor((this.o.count * i) / this.procs),
        registerConcurrency: Math.max(1, Math.round((o.registerConcurrency ?? 16) / this.procs)),
      },
    }));
  }

  private heard(i: number, m: ProcMessage): void {
    if (m.type === 'taken') {
      const t: Taken = { agent: m.agent, machineId: m.machineId, a: m.a, at: m.atHost - performance.timeOrigin };
      this.taken.push(t);
      this.o.onTaken?.(t);
      return;
    }
    this.counters[i] = m.counters;
    this.retried = this.counters.reduce((n, c) => n + c.retried, 0);
    this.shed = this.counters.reduce((n, c) => n + c.shed, 0);
    this.errors = this.counters.flatMap((c) => c.errors).slice(0, 20);
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    if (m.error !== undefined) p.reject(new Error(`fleet process ${i + 1}: ${m.error}`));
    else p.resolve(m.value);
  }

  async settled(n: number, timeoutMs: number): Promise<number> {
    return Math.max(...(await this.all<number>(() => ({ type: 'settled', n, timeoutMs }))));
  }

  async window(): Promise<FleetWindow> {
    const ws = await this.all<FleetWindow>(() => ({ type: 'window' }));
    const cat = (f: (w: FleetWindow) => number[]) => ws.flatMap(f);
    const add = (f: (w: FleetWindow) => number) => ws.reduce((n, w) => n + f(w), 0);
    return {
      seconds: Math.max(...ws.map((w) => w.seconds)),
      heartbeats: add((w) => w.heartbeats),
      heartbeatOverMs: cat((w) => w.heartbeatOverMs),
      heartbeatWokenMs: cat((w) => w.heartbeatWokenMs),
      assigned: add((w) => w.assigned),
      started: add((w) => w.started),
      completed: add((w) => w.completed),
      failures: add((w) => w.failures),
      fleetLoopDelayP50Ms: Math.max(...ws.map((w) => w.fleetLoopDelayP50Ms)),
      fleetLoopDelayP99Ms: Math.max(...ws.map((w) => w.fleetLoopDelayP99Ms)),
      split: {
        inMs: cat((w) => w.split.inMs),
        preMs: cat((w) => w.split.preMs),
        serverOverMs: cat((w) => w.split.serverOverMs),
        backMs: cat((w) => w.split.backMs),
      },
    };
  }

  async runningOf(names: string[]): Promise<number[]> {
    const each = await this.all<number[]>(() => ({ type: 'runningOf', names }));
    return names.map((_n, k) => each.reduce((n, r) => n + r[k]!, 0));
  }

  async kill(names: string[]): Promise<void> {
    await this.all(() => ({ type: 'kill', names }));
  }

  async stop(): Promise<void> {
    await this.all(() => ({ type: 'stop' })).catch(() => {});
    for (const c of this.children) if (c.exitCode === null && c.signalCode === null) c.kill();
  }
}
