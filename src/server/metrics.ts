import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { attemptEndKinds, type AttemptEndKind } from '../domain/attempt-end.js';
import { attemptStates, isAttemptActive, type AttemptState } from '../domain/attempt-state.js';
import { normalizeGpuType } from '../domain/resources.js';
import { stageNeed } from '../scheduler/checks.js';
import { waitReasonKind } from '../scheduler/wait-reason-kind.js';
import { machinePool } from '../domain/machine-pool.js';
import type { MachineView } from '../scheduler/snapshot.js';
import type { Store } from '../store/store.js';

/** Stage waits (ready → running), seconds: from a placement within a pass to a day-long queue. */
const WAIT_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 86_400];
/** Events read per page when catching up at a scrape. */
const EVENT_PAGE = 5000;

/**
 * The control plane's Prometheus metrics (docs/metrics.md). Gauges are read from the database at
 * each scrape (queues, machines, resources, outbox), so every replica reports the same cluster;
 * counters and the wait histogram follow the event log from this process's start (a counter
 * starts at zero with its process, as Prometheus expects); the scheduler's own pass timings are
 * observed where the passes run.
 */
export class Metrics {
  readonly registry = new Registry();
  readonly passSeconds: Histogram<'where'>;
  readonly placements: Counter;
  readonly preemptions: Counter;
  private readonly events: Counter<'type'>;
  private readonly attempts: Counter<'outcome'>;
  private readonly attemptEnds: Counter<'end'>;
  private readonly waits: Histogram<'pool'>;
  /** The last event counted; null until start() (or the first scrape) reads the head. */
  private seq: number | null = null;
  private catchingUp: Promise<void> | null = null;

  constructor(
    private readonly store: Store,
    private readonly now: () => number,
  ) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry, prefix: 'gantry_process_' });
    this.passSeconds = new Histogram({
      name: 'gantry_scheduler_pass_seconds',
      help: 'Scheduler pass duration',
      labelNames: ['where'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
      registers,
    });
    this.placements = new Counter({ name: 'gantry_scheduler_placements_total', help: 'Attempts placed by scheduler passes in this process', registers });
    this.preemptions = new Counter({ name: 'gantry_scheduler_preemptions_total', help: 'Attempts preempted by scheduler passes in this process', registers });
    this.events = new Counter({
      name: 'gantry_events_total',
      help: 'Events written (every state change), by type, since this process started',
      labelNames: ['type'],
      registers,
    });
    this.attempts = new Counter({
      name: 'gantry_attempts_total',
      help: 'Attempts that ended, by outcome, since this process started',
      labelNames: ['outcome'],
      registers,
    });
    this.attemptEnds = new Counter({
      name: 'gantry_attempt_ends_total',
      help: 'Attempts that ended, by how (exited, signaled, timeout, oom-killed, lost, …), since this process started',
      labelNames: ['end'],
      registers,
    });
    this.waits = new Histogram({
      name: 'gantry_stage_wait_seconds',
      help: 'How long a stage waited from ready to placed, by pool',
      labelNames: ['pool'],
      buckets: WAIT_BUCKETS,
      registers,
    });
    // collect() runs with the gauge as `this`; the metrics object is reached through `self`.
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const self = this;
    new Gauge({
      name: 'gantry_queue_depth',
      help: 'Ready stages waiting for a machine, by pool',
      labelNames: ['pool'],
      registers,
      async collect() {
        this.reset();
        for (const [pool, n] of self.byPool((await self.snapshot()).queues, (q) => q.ready)) this.set({ pool }, n);
      },
    });
    new Gauge({
      name: 'gantry_queue_oldest_wait_seconds',
      help: 'Age of the oldest ready stage, by pool',
      labelNames: ['pool'],
      registers,
      async collect() {
        this.reset();
        const { queues, at } = await self.snapshot();
        const oldest = new Map<string, number>();
        for (const q of queues) oldest.set(q.pool, Math.min(oldest.get(q.pool) ?? Infinity, q.oldestReadySince));
        for (const [pool, t] of oldest) this.set({ pool }, Math.max(0, (at - t) / 1000));
      },
    });
    new Gauge({
      name: 'gantry_stages_pending',
      help: 'Ready stages by pool and why they wait (placeable, gpu-busy, gpu-type, …: the reject code most machines give)',
      labelNames: ['pool', 'reason'],
      registers,
      async collect() {
        this.reset();
        const { queues, shapes, machines } = await self.snapshot();
        for (const q of queues) {
          const shape = shapes.get(q.shape);
          const reason = shape ? waitReasonKind(stageNeed(shape), machines) : 'unknown';
          this.inc({ pool: q.pool, reason }, q.ready);
        }
      },
    });
    new Gauge({
      name: 'gantry_machines',
      help: 'Machines by pool, health and scheduling',
      labelNames: ['pool', 'health', 'scheduling'],
      registers,
      async collect() {
        this.reset();
        for (const m of (await self.snapshot()).machines) this.inc({ pool: machinePool(m), health: m.health, scheduling: m.scheduling });
      },
    });
    for (const [what, help] of [
      ['total', 'Capacity of machines not removed'],
      ['allocated', 'Capacity held by attempts'],
    ] as const) {
      new Gauge({
        name: `gantry_resources_${what}`,
        help: `${help}, by pool, resource (cpu in cores, memory in bytes, gpu) and GPU type`,
        labelNames: ['pool', 'resource', 'gpu_type'],
        registers,
        async collect() {
          this.reset();
          for (const m of (await self.snapshot()).machines) {
            const pool = machinePool(m);
            this.inc({ pool, resource: 'cpu', gpu_type: '' }, (what === 'total' ? m.cpuMillisTotal : m.cpuMillisTotal - m.cpuMillisFree) / 1000);
            this.inc({ pool, resource: 'memory', gpu_type: '' }, what === 'total' ? m.memoryBytesTotal : m.memoryBytesTotal - m.memoryBytesFree);
            for (const g of m.gpus) this.inc({ pool, resource: 'gpu', gpu_type: normalizeGpuType(g.type) }, what === 'total' || !g.free ? 1 : 0);
          }
        },
      });
    }
    new Gauge({
      name: 'gantry_outbox_lag_seconds',
      help: 'Age of the oldest outbox message not yet published (0: none)',
      registers,
      async collect() {
        const [oldest] = await self.store.outboxPending({ limit: 1 });
        this.set(oldest ? Math.max(0, (self.now() - oldest.createdAt) / 1000) : 0);
      },
    });
  }

  private cached: { at: number; promise: Promise<Snapshot> } | null = null;

  /** One read of the database per scrape, shared by every gauge of it (and counters caught up with it). */
  private snapshot(): Promise<Snapshot> {
    const at = this.now();
    if (this.cached && at - this.cached.at < 500) return this.cached.promise;
    const promise = (async () => {
      await this.catchUp();
      const [cluster, queues, shapes] = [await this.store.clusterView(), await this.store.queueStats(), await this.store.readyShapes({ now: at })];
      return { at, machines: cluster.machines, queues, shapes: new Map(shapes.map((s) => [s.shape, s])) };
    })();
    this.cached = { at, promise };
    promise.catch(() => (this.cached = null));
    return promise;
  }

  private byPool<T extends { pool: string }>(rows: readonly T[], value: (r: T) => number): Map<string, number> {
    const out = new Map<string, number>();
    for (const r of rows) out.set(r.pool, (out.get(r.pool) ?? 0) + value(r));
    return out;
  }

  /** Counters count from here: the event log's head when the control plane starts. */
  async start(): Promise<void> {
    this.seq = await this.store.eventsHead();
  }

  /** Counts the events written since the last scrape. */
  async catchUp(): Promise<void> {
    this.catchingUp ??= (async () => {
      try {
        this.seq ??= await this.store.eventsHead();
        for (;;) {
          const page = await this.store.eventsList({ afterSeq: this.seq, limit: EVENT_PAGE });
          for (const e of page) {
            this.events.inc({ type: e.type });
            const [noun, verb] = e.type.split(':');
            if (noun === 'attempt' && verb && attemptStates.includes(verb as AttemptState) && !isAttemptActive(verb)) {
              this.attempts.inc({ outcome: verb });
              // Every end's event carries its kind (docs/state-machines.md): an oom-killed attempt is a failure that says why.
              if (typeof e.data.end === 'string' && attemptEndKinds.includes(e.data.end as AttemptEndKind)) this.attemptEnds.inc({ end: e.data.end });
            }
            if (e.type === 'attempt:scheduled' && typeof e.data.waitedMs === 'number')
              this.waits.observe({ pool: typeof e.data.pool === 'string' ? e.data.pool : 'unknown' }, e.data.waitedMs / 1000);
            this.seq = e.seq;
          }
          if (page.length < EVENT_PAGE) return;
        }
      } finally {
        this.catchingUp = null;
      }
    })();
    return this.catchingUp;
  }

  /** The text Prometheus scrapes. */
  async text(): Promise<string> {
    await this.snapshot();
    return this.registry.metrics();
  }
}

interface Snapshot {
  at: number;
  machines: MachineView[];
  queues: { pool: string; shape: string; ready: number; oldestReadySince: number }[];
  shapes: Map<string, { shape: string; resources: import('../domain/resources.js').Resources; placement: import('../domain/resources.js').Placement }>;
}
