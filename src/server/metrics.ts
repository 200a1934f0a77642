import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { attemptEndKinds, type AttemptEndKind } from '../domain/attempt-end.js';
import { attemptStates, isAttemptActive, type AttemptState } from '../domain/attempt-state.js';
import { GPU_MILLI_WHOLE, gangSizeOf, gpuMilliUsed, normalizeGpuType } from '../domain/resources.js';
import { WAIT_REASON_KINDS, waitReasonKind } from '../scheduler/wait-reason-kind.js';
import { machinePool } from '../domain/machine-pool.js';
import type { MachineView } from '../scheduler/snapshot.js';
import type { Store } from '../store/store.js';
import type { AutoscaleDecision, AutoscalePassReport } from '../autoscale/autoscale-loop.js';

/** Stage waits (ready → running), seconds: from a placement within a pass to a day-long queue. */
const WAIT_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 86_400];
/** The autoscaler's decision kinds (AutoscaleDecision's action). */
const AUTOSCALE_ACTIONS: readonly AutoscaleDecision['action'][] = ['start', 'drain', 'keep', 'release', 'fail', 'stop'];
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
  /** Set by each scheduler pass of this process (the leader's): what its plan held for gangs. */
  readonly gangReservedGpus: Gauge;
  private readonly events: Counter<'type'>;
  private readonly attempts: Counter<'outcome'>;
  private readonly attemptEnds: Counter<'end'>;
  private readonly waits: Histogram<'pool'>;
  private readonly autoscaleDecisions: Counter<'pool' | 'action'>;
  private readonly autoscaleGpuSeconds: Counter<'pool'>;
  private readonly autoscaleIdleGpuSeconds: Counter<'pool'>;
  /** The last event counted; null until start() (or the first scrape) reads the head. */
  private seq: number | null = null;
  private catchingUp: Promise<void> | null = null;

  constructor(
    private readonly store: Store,
    private readonly now: () => number,
    /** The autoscaled pools (ServerConfig.pools): each has its gauges, at 0 with no machine. */
    private readonly autoscaled: readonly string[] = [],
  ) {
    const registers = [this.registry];
    // prom-client's own names (process_cpu_seconds_total, nodejs_eventloop_lag_seconds, …), as
    // every client library exports them and the Node.js dashboards query them: a prefix here
    // doubled theirs (gantry_process_process_cpu_seconds_total). The scrape's job label says whose.
    collectDefaultMetrics({ register: this.registry });
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
    // The queue's gauges have a series for every known pool (and reason) at 0 when nothing waits
    // there: an absent series is not 0 to Prometheus (an alert on depth > N would never resolve).
    new Gauge({
      name: 'gantry_queue_depth',
      help: 'Ready stages waiting for a machine, by pool (0 for a known pool with none)',
      labelNames: ['pool'],
      registers,
      async collect() {
        this.reset();
        const snap = await self.snapshot();
        for (const pool of knownPools(snap)) this.set({ pool }, 0);
        for (const [pool, n] of self.byPool(snap.queues, (q) => q.ready)) this.set({ pool }, n);
      },
    });
    new Gauge({
      name: 'gantry_queue_oldest_wait_seconds',
      help: 'Age of the oldest ready stage, by pool (0 for a known pool with none waiting)',
      labelNames: ['pool'],
      registers,
      async collect() {
        this.reset();
        const snap = await self.snapshot();
        const oldest = new Map<string, number>();
        for (const q of snap.queues) oldest.set(q.pool, Math.min(oldest.get(q.pool) ?? Infinity, q.oldestReadySince));
        for (const pool of knownPools(snap)) this.set({ pool }, 0);
        for (const [pool, t] of oldest) this.set({ pool }, Math.max(0, (snap.at - t) / 1000));
      },
    });
    new Gauge({
      name: 'gantry_stages_pending',
      help: 'Ready stages by pool and why they wait (placeable, gpu-busy, gpu-type, …: the reject code most machines give; gang-machines: a gang too few machines could ever run together; 0 for every known pool and reason)',
      labelNames: ['pool', 'reason'],
      registers,
      async collect() {
        this.reset();
        const snap = await self.snapshot();
        for (const pool of knownPools(snap)) for (const reason of WAIT_REASON_KINDS) this.set({ pool, reason }, 0);
        for (const q of snap.queues) {
          const shape = snap.shapes.get(q.shape);
          const reason = shape ? waitReasonKind(shape, snap.machines) : 'unknown';
          this.inc({ pool: q.pool, reason }, q.ready);
        }
      },
    });
    // Gangs (docs/gangs.md): the waiting ones from the database, as the queue's gauges; what the
    // passes hold for them is the planner's, known only where passes run (the leader).
    new Gauge({
      name: 'gantry_gangs_waiting',
      help: 'Ready gang stages (resources.machines of 2 or more) waiting for their machines, by pool (0 for a known pool with none)',
      labelNames: ['pool'],
      registers,
      async collect() {
        this.reset();
        const snap = await self.snapshot();
        for (const pool of knownPools(snap)) this.set({ pool }, 0);
        for (const q of snap.queues) {
          const shape = snap.shapes.get(q.shape);
          if (shape && gangSizeOf(shape.resources) > 1) this.inc({ pool: q.pool }, q.ready);
        }
      },
    });
    this.gangReservedGpus = new Gauge({
      name: 'gantry_gang_reserved_gpus',
      help: "GPUs the last scheduler pass of this process held for waiting gangs (a member's GPUs on each machine of a held set); 0 on a replica that runs no pass",
      registers,
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
    // One quantity and one unit a metric (Prometheus naming), capacity and allocation apart, so
    // sum() over any label means something and utilisation is one division.
    const resources: { name: string; help: string; gpu?: true; value: (m: MachineView, add: (n: number, gpuType?: string) => void) => void }[] = [
      { name: 'gantry_pool_cpu_cores', help: 'CPU cores of the machines not removed', value: (m, add) => add(m.cpuMillisTotal / 1000) },
      { name: 'gantry_pool_cpu_allocated_cores', help: 'CPU cores held by attempts', value: (m, add) => add((m.cpuMillisTotal - m.cpuMillisFree) / 1000) },
      { name: 'gantry_pool_memory_bytes', help: 'Memory of the machines not removed, in bytes', value: (m, add) => add(m.memoryBytesTotal) },
      { name: 'gantry_pool_memory_allocated_bytes', help: 'Memory held by attempts, in bytes', value: (m, add) => add(m.memoryBytesTotal - m.memoryBytesFree) },
      { name: 'gantry_pool_gpus', help: 'GPUs of the machines not removed, by type', gpu: true, value: (m, add) => m.gpus.forEach((g) => add(1, g.type)) },
      {
        name: 'gantry_pool_gpus_allocated',
        help: 'GPUs held by attempts, by type',
        gpu: true,
        // A share counts as its part of a GPU (issue 29): two halves of one GPU are 1, one is 0.5.
        value: (m, add) => m.gpus.forEach((g) => add(gpuMilliUsed(g) / GPU_MILLI_WHOLE, g.type)),
      },
    ];
    for (const r of resources) {
      new Gauge({
        name: r.name,
        help: `${r.help}, by pool`,
        labelNames: r.gpu ? ['pool', 'gpu_type'] : ['pool'],
        registers,
        async collect() {
          this.reset();
          for (const m of (await self.snapshot()).machines) {
            const pool = machinePool(m);
            r.value(m, (n, gpuType) => this.inc(gpuType === undefined ? { pool } : { pool, gpu_type: normalizeGpuType(gpuType) }, n));
          }
        },
      });
    }
    // The autoscaler (docs/autoscaling.md): its machines from the database at each scrape, as the
    // other gauges (every replica reports the same); its decisions and GPU-seconds where it runs, on
    // the leader, from each pass's report.
    const lifecycleGauge = (name: string, help: string, states: readonly string[]) =>
      new Gauge({
        name,
        help,
        labelNames: ['pool'],
        registers,
        async collect() {
          this.reset();
          if (self.autoscaled.length === 0) return;
          for (const pool of self.autoscaled) this.set({ pool }, 0);
          for (const r of await self.store.autoscaleRows({ active: true })) if (states.includes(r.lifecycle)) this.inc({ pool: r.pool });
        },
      });
    lifecycleGauge('gantry_autoscale_desired_machines', 'Machines an autoscaled pool wants: provisioning, joining and ready, by pool', [
      'provisioning',
      'joining',
      'ready',
    ]);
    lifecycleGauge('gantry_autoscale_ready_machines', 'Machines of an autoscaled pool that joined and take work (current), by pool', ['ready']);
    lifecycleGauge('gantry_autoscale_starting_machines', 'Machines of an autoscaled pool on their way in (provisioning, joining), by pool', [
      'provisioning',
      'joining',
    ]);
    this.autoscaleDecisions = new Counter({
      name: 'gantry_autoscale_decisions_total',
      help: "The autoscaler's decisions in this process, by pool and action (start, drain, keep, release, fail, stop)",
      labelNames: ['pool', 'action'],
      registers,
    });
    this.autoscaleGpuSeconds = new Counter({
      name: 'gantry_autoscale_gpu_seconds_total',
      help: 'GPU-seconds of the autoscaled machines that joined (ready or draining), by pool, counted by this process (÷ 3600: GPU-hours provisioned)',
      labelNames: ['pool'],
      registers,
    });
    this.autoscaleIdleGpuSeconds = new Counter({
      name: 'gantry_autoscale_idle_gpu_seconds_total',
      help: 'Of those, the GPU-seconds no attempt held (a share counts its free part), by pool',
      labelNames: ['pool'],
      registers,
    });
    // A series at 0 for every pool and action from the start: an absent series is not 0 to Prometheus.
    for (const pool of autoscaled)
      for (const action of AUTOSCALE_ACTIONS) {
        this.autoscaleDecisions.inc({ pool, action }, 0);
      }
    for (const pool of autoscaled) {
      this.autoscaleGpuSeconds.inc({ pool }, 0);
      this.autoscaleIdleGpuSeconds.inc({ pool }, 0);
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

  /** What one pass of the autoscaler decided and the GPU time it saw (Autoscaler.pass). */
  autoscalePass(report: AutoscalePassReport): void {
    for (const d of report.decisions) this.autoscaleDecisions.inc({ pool: d.pool, action: d.action });
    for (const g of report.gpuSeconds) {
      this.autoscaleGpuSeconds.inc({ pool: g.pool }, g.provisioned);
      this.autoscaleIdleGpuSeconds.inc({ pool: g.pool }, g.idle);
    }
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
            // A placement's wait: on `attempt:scheduled`, or on `attempt:running` where it started at placement.
            if ((e.type === 'attempt:scheduled' || e.type === 'attempt:running') && typeof e.data.waitedMs === 'number')
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

/** The pools the cluster knows now: those of its machines (not removed) and of its queues. */
function knownPools(s: Pick<Snapshot, 'machines' | 'queues'>): Set<string> {
  return new Set([...s.machines.map(machinePool), ...s.queues.map((q) => q.pool)]);
}

interface Snapshot {
  at: number;
  machines: MachineView[];
  queues: { pool: string; shape: string; ready: number; oldestReadySince: number }[];
  shapes: Map<string, { shape: string; resources: import('../domain/resources.js').Resources; placement: import('../domain/resources.js').Placement }>;
}
