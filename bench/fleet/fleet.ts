import { monitorEventLoopDelay } from 'node:perf_hooks';
import { HttpError, JsonClient } from './json-client.js';
import { type AgentObserver, type Assignment, type HeartbeatSplit, SimAgent } from './sim-agent.js';

export type { Assignment } from './sim-agent.js';

export interface FleetOptions {
  /** Server URLs; agent i speaks to `servers[i % servers.length]` (two replicas: half the fleet each, as behind a balancer). */
  servers: string[];
  joinToken: string;
  count: number;
  /** Machine names are `${prefix}-${i}`. */
  prefix: string;
  cpuMillis: number;
  memoryBytes: number;
  /** A stage's fake run time: `sleep N` commands run N s, anything else this many ms. */
  runMs: number;
  /** Registrations in flight at once. */
  registerConcurrency?: number;
  /** Agents from before the period grew with the fleet: they ignore the answer's heartbeatMs (sim-agent.ts). */
  oldAgents?: boolean;
  /** This fleet's agents are numbered from here (a part of a fleet spread over processes: fleet-procs.ts). */
  offset?: number;
  /** Told of each assignment as it is taken (a fleet process passes them on to the bench's). */
  onTaken?: (t: Taken) => void;
}

/**
 * What the bench drives a fleet through: one in this process (`Fleet`), or one spread over several
 * processes (`ProcFleet`, fleet-procs.ts). `taken` and the counters are kept current; `window()`
 * may have to ask the processes.
 */
export interface FleetLike {
  readonly taken: Taken[];
  readonly errors: string[];
  readonly retried: number;
  readonly shed: number;
  start(): Promise<void>;
  settled(n: number, timeoutMs: number): Promise<number>;
  window(): FleetWindow | Promise<FleetWindow>;
  /** Attempts acknowledged and "running" on each named agent (0 for one not in the fleet). */
  runningOf(names: string[]): Promise<number[]>;
  /** Stops the named agents at once, as machines that die. */
  kill(names: string[]): Promise<void>;
  stop(): Promise<void>;
  /** The processes holding the agents, besides this one (their CPU is the fleet's too). */
  readonly pids: number[];
}

/** Who took which attempt, and when (performance.now()). */
export interface Taken {
  agent: string;
  machineId: string;
  a: Assignment;
  at: number;
}

/** What the fleet saw over a window (since the previous `window()`). */
export interface FleetWindow {
  seconds: number;
  heartbeats: number;
  /** Round trip minus the hold, of the heartbeats answered empty (held the whole `waitMs`): the write, the final read, the answer, and the queues on both sides. */
  heartbeatOverMs: number[];
  /** Round trips of heartbeats that brought work (woken before their hold ended). */
  heartbeatWokenMs: number[];
  assigned: number;
  started: number;
  completed: number;
  failures: number;
  /** The fleet process's own event-loop delay (p50 and p99, ms): how late its timers and answers ran. */
  fleetLoopDelayP50Ms: number;
  fleetLoopDelayP99Ms: number;
  /** The heartbeats answered empty, in parts on one clock (sim-agent.ts, `HeartbeatSplit`), when the server timed them: each part's values. */
  split: { [K in keyof HeartbeatSplit]: number[] };
}

/** `sleep N` (N seconds) from a stage's command, or null. */
function sleepSeconds(command: string[]): number | null {
  const [cmd, n] = command;
  return cmd === 'sleep' && command.length === 2 && n !== undefined && Number.isFinite(Number(n)) ? Number(n) : null;
}

/**
 * N simulated agents in one process (sim-agent.ts), sharing one keep-alive connection pool and
 * one event loop, each with its own machine name, capacity and credential. Keeps the figures a
 * bench reads per window, and every assignment taken (for a test's "placed once" check).
 */
export class Fleet implements AgentObserver, FleetLike {
  readonly agents: SimAgent[] = [];
  readonly taken: Taken[] = [];
  readonly errors: string[] = [];
  /** Jobs with an outcome answered `ok`. */
  readonly succeededJobs = new Set<string>();
  /** Requests answered 5xx or 429, which agents retry (the real one too), and the others. */
  retried = 0;
  /** Heartbeats shed by a server past its budget (429 heartbeat_shed; among `retried`). */
  shed = 0;
  readonly pids: number[] = [];
  private readonly loopDelay = monitorEventLoopDelay({ resolution: 10 });
  private w = this.freshWindow();
  private windowStart = performance.now();

  constructor(readonly o: FleetOptions) {
    for (let k = 0; k < o.count; k++) {
      const i = k + (o.offset ?? 0);
      this.agents.push(
        new SimAgent({
          server: o.servers[i % o.servers.length]!,
          name: `${o.prefix}-${i}`,
          cpuMillis: o.cpuMillis,
          memoryBytes: o.memoryBytes,
          joinToken: o.joinToken,
          // One connection pool per simulated agent, as each real agent has its own: node:http's
          // Agent keeps a pool's sockets in one array per server and finds a freed socket in it by
          // a linear search (removeSocket, addRequest), so one pool for 10,000 agents spent
          // 0.14–0.24 s at a time in it when answers came together, and every heartbeat answered
          // meanwhile was timed late by the fleet, not the server (docs/throughput.md, "What the
          // slowest heartbeats waited on").
          client: new JsonClient(),
          observer: this,
          ...(o.oldAgents ? { old: true } : {}),
          runMs: (a) => {
            const s = sleepSeconds(a.command);
            return s === null ? o.runMs : s * 1000;
          },
        }),
      );
    }
  }

  private freshWindow(): Omit<FleetWindow, 'seconds' | 'fleetLoopDelayP50Ms' | 'fleetLoopDelayP99Ms'> {
    return {
      heartbeats: 0,
      heartbeatOverMs: [],
      heartbeatWokenMs: [],
      assigned: 0,
      started: 0,
      completed: 0,
      failures: 0,
      split: { inMs: [], preMs: [], serverOverMs: [], backMs: [] },
    };
  }

  /**
   * Registers every agent (a few at a time), each starting to heartbeat as soon as it is registered,
   * as a real agent does, its first heartbeat at a random point of one period. (Registering all
   * first and starting them together made thousands of machines silent past suspect-after, and
   * their first heartbeats a mass return to ready, which is not what a fleet does.)
   */
  async start(): Promise<void> {
    const queue = [...this.agents];
    this.loopDelay.enable();
    const worker = async () => {
      for (let a = queue.shift(); a; a = queue.shift()) {
        await a.register();
        a.start(Math.random() * a.settings!.heartbeatMs);
      }
    };
    await Promise.all(Array.from({ length: this.o.registerConcurrency ?? 16 }, worker));
    this.window();
  }

  /**
   * Resolves once every live agent has had `n` heartbeats answered, with the seconds it took;
   * rejects past `timeoutMs`. Right after a fleet starts, some first heartbeats take many seconds
   * (docs/throughput.md, "A fleet of agents"): figures are taken after this.
   */
  async settled(n: number, timeoutMs: number): Promise<number> {
    const t0 = performance.now();
    for (;;) {
      const behind = this.agents.filter((a) => !a.dead && a.heartbeats < n).length;
      if (behind === 0) return (performance.now() - t0) / 1000;
      if (performance.now() - t0 > timeoutMs) throw new Error(`${behind} agents had fewer than ${n} heartbeats answered after ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** The figures since the previous call, and a new window from now. */
  window(): FleetWindow {
    const now = performance.now();
    const out: FleetWindow = {
      ...this.w,
      seconds: (now - this.windowStart) / 1000,
      fleetLoopDelayP50Ms: this.loopDelay.percentile(50) / 1e6,
      fleetLoopDelayP99Ms: this.loopDelay.percentile(99) / 1e6,
    };
    this.w = this.freshWindow();
    this.windowStart = now;
    this.loopDelay.reset();
    return out;
  }

  async runningOf(names: string[]): Promise<number[]> {
    const byName = new Map(this.agents.map((a) => [a.name, a]));
    return names.map((n) => byName.get(n)?.running ?? 0);
  }

  async kill(names: string[]): Promise<void> {
    const these = new Set(names);
    await Promise.all(this.agents.filter((a) => these.has(a.name)).map((a) => a.kill()));
  }

  /** Stops every agent still running and closes the connections. */
  async stop(): Promise<void> {
    await Promise.all(this.agents.map((a) => a.kill()));
    this.loopDelay.disable();
    for (const a of this.agents) a.o.client.close();
  }

  heartbeat(_agent: SimAgent, rttMs: number, waitMs: number, empty: boolean, split: HeartbeatSplit | null): void {
    this.w.heartbeats++;
    if (split) for (const k of Object.keys(this.w.split) as (keyof HeartbeatSplit)[]) this.w.split[k].push(split[k]);
    if (empty) this.w.heartbeatOverMs.push(Math.max(0, rttMs - waitMs));
    else this.w.heartbeatWokenMs.push(rttMs);
  }

  assigned(agent: SimAgent, a: Assignment): void {
    this.w.assigned++;
    const t = { agent: agent.name, machineId: agent.machineId, a, at: performance.now() };
    this.taken.push(t);
    this.o.onTaken?.(t);
  }

  started(): void {
    this.w.started++;
  }

  completed(_agent: SimAgent, a: Assignment, result: string): void {
    if (result !== 'ok') return;
    this.w.completed++;
    this.succeededJobs.add(a.jobId);
  }

  failed(agent: SimAgent, what: 'heartbeat' | 'report', err: unknown): void {
    this.w.failures++;
    if (err instanceof HttpError && (err.status >= 500 || err.status === 429)) {
      this.retried++;
      if (err.code === 'heartbeat_shed') this.shed++;
      return;
    }
    if (this.errors.length < 20) this.errors.push(`${agent.name} ${what}: ${err instanceof Error ? err.message : String(err)}`);
  }
}
