import type { Clock } from '../domain/clock.js';
import { MachineHealth } from '../domain/machine-health.js';
import { GPU_MILLI_WHOLE, gpuFreeMilli } from '../domain/resources.js';
import { DEFAULT_MAX_PLACEMENTS, planPlacements, type PlanOptions } from '../scheduler/plan-placements.js';
import type { RecentWorkload } from '../scheduler/recent-workload.js';
import type { SharePolicyName } from '../scheduler/share-policies.js';
import type { ClusterView, Plan, QueuedStage, QueueShape, RunningAttempt, SchedulerSnapshot, TeamView } from '../scheduler/snapshot.js';
import { errorText } from '../lib/error-text.js';
import type { AutoscaleRow, AutoscaleStore } from './autoscale-row.js';
import { MachineLifecycle } from './machine-lifecycle.js';
import { planScaleDown, ScaleDownAction, type ScaleDownStep } from './plan-scale-down.js';
import { planScaleUp } from './plan-scale-up.js';
import { poolStates, scaledMachines } from './pool-states.js';
import { ScaleProvider, type PoolTemplate } from './pool-template.js';
import { ProviderClosedError, type MachineProvider } from './provider.js';

/**
 * What a pass reads and writes: the scheduler's reads (the Store has them, and PlacementSource is
 * a pick of them) and the autoscaler's verbs. Declared here, not imported from the store, as the
 * autoscaler sits below it (test/layering.test.ts); the Store satisfies it as it is.
 */
export interface AutoscaleSource extends AutoscaleStore {
  clusterView(): Promise<ClusterView>;
  readyShapes(p: { now: number }): Promise<QueueShape[]>;
  queueHeads(p: { now: number; shapes: { shape: string; limit: number }[] }): Promise<QueuedStage[]>;
  schedulerTeams(p: { usage: boolean }): Promise<TeamView[]>;
  preemptionView(): Promise<RunningAttempt[]>;
}

/** Where the machines it starts join: the API's address, a join token, the CA (with TLS). Asked for when a start is to be made. */
export interface JoinInfo {
  server: string;
  joinToken: string;
  ca?: string;
}

/** What the autoscaler logs with (the app log's shape: an object, then the message). */
export interface AutoscaleLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/** One decision or provider outcome of a pass, for the log and the metrics (its event is in the database). */
export interface AutoscaleDecision {
  pool: string;
  action: 'start' | 'drain' | 'keep' | 'release' | 'fail' | 'stop';
  /** The machines it is about. */
  names: string[];
  reason: string;
}

export interface AutoscalePassReport {
  decisions: AutoscaleDecision[];
  /** Per declared pool, after the pass: desired (counted: provisioning, joining, ready), current (ready), starting (provisioning, joining). */
  pools: { pool: string; desired: number; current: number; starting: number }[];
  /**
   * GPU-seconds since the previous pass of this process, per pool, over its ready and draining
   * machines (provisioned), and of those the GPUs the cluster view showed free (idle; a share
   * counts its free part). Zero on a process's first pass: a counter starts with its process.
   */
  gpuSeconds: { pool: string; provisioned: number; idle: number }[];
}

export interface AutoscalerOptions {
  store: AutoscaleSource;
  pools: readonly PoolTemplate[];
  /** The provider of each pool, by pool name (local: one shared; command: one per pool). */
  providers: ReadonlyMap<string, MachineProvider>;
  clock: Clock;
  /** The loop's interval: a pool's maxStartsPerInterval counts starts within it. */
  intervalMs: number;
  join: () => Promise<JoinInfo>;
  log: AutoscaleLog;
  /** As the scheduler's pass places: its GPU policy and FGD's remembered workload. */
  gpuPolicy?: SharePolicyName;
  recentWorkload?: RecentWorkload;
  /** As the scheduler's pass: a stage it would preempt for counts as served (room is being made), not as waiting. */
  preemptionCooldownMs?: number;
  /** How deep each ready shape's queue is read (default 1000): what fits nowhere must be seen too, unlike the scheduler's room-bounded read. */
  headLimit?: number;
}

/** Deep enough to see what waits, bounded so a backlog of millions costs a pass no more than this per shape. */
const DEFAULT_HEAD_LIMIT = 1000;

/**
 * The autoscaler (issue 30, docs/autoscaling.md "The loop"): `pass()` is one decision, run by the
 * control plane's loop on the leader only. Every pass starts from the database (the rows of
 * autoscaled machines, the queue, the cluster), never from what an earlier pass kept, so a
 * restarted server or a new leader carries on where the last one stopped: a start written but not
 * yet asked of the provider is asked (providers are idempotent by name), a stop not yet confirmed
 * is asked again. The only memory is for metrics (the time of the previous pass) and the local
 * provider's restart: its machines die with the server (`--exit-with-parent`), so the first pass of
 * a process asks it to start again every row it should be running.
 */
export class Autoscaler {
  private firstPass = true;
  private lastPassAt: number | null = null;
  private readonly byName: Map<string, PoolTemplate>;

  constructor(private readonly o: AutoscalerOptions) {
    this.byName = new Map(o.pools.map((p) => [p.name, p]));
  }

  async pass(): Promise<AutoscalePassReport> {
    const { store, clock } = this.o;
    const now = clock.now();
    const decisions: AutoscaleDecision[] = [];
    const note = (d: AutoscaleDecision) => {
      decisions.push(d);
      this.o.log.info({ autoscale: d.action, pool: d.pool, machines: d.names }, d.reason);
    };
    const { snapshot, plan } = await this.plan(now);

    // Scale down first: a machine drained or failed now no longer counts toward what starts. Only
    // the pools' states need the rows at their end (a run of failures), which pile up (one per
    // machine a pool ever started, ~11 ms a thousand to read): read once a pass, the others not.
    let rows = await store.autoscaleRows({ active: true });
    const lost = new Set(snapshot.machines.filter((m) => m.health === MachineHealth.lost).map((m) => m.id));
    const down = planScaleDown({ machines: scaledMachines(rows, lost), pools: this.o.pools, plan, now });
    for (const step of down) await this.applyDown(step, now, note);

    rows = await store.autoscaleRows({});
    const states = poolStates(rows, this.o.pools, now, this.o.intervalMs);
    const up = planScaleUp({
      snapshot,
      plan,
      pools: this.o.pools,
      state: [...states.values()].map((s) => s.state),
      now,
      planOptions: this.planOptions(),
    });
    for (const start of up.starts) {
      const made = await store.autoscaleStart({
        pool: start.pool,
        heldFor: start.machineStages ?? Array.from({ length: start.count }, () => []),
        reason: start.reason,
        now,
      });
      note({ pool: start.pool, action: 'start', names: made.map((r) => r.name), reason: start.reason });
    }
    // A stage the simulation counted onto a starting machine's spare room joins that machine's hold
    // (a gang: each of its members' starting machines).
    const holds = new Map<string, string[]>();
    for (const w of up.waiting)
      for (const on of w.startingOn ?? []) {
        const row = states.get(on.pool)?.starting[on.index];
        if (row === undefined || row.heldFor.includes(w.stageId)) continue;
        holds.set(row.name, [...(holds.get(row.name) ?? []), w.stageId]);
      }
    for (const [name, stageIds] of holds) await store.autoscaleHold({ name, stageIds, now });
    await store.autoscaleWaitsPut({ waits: up.waiting.map((w) => ({ stageId: w.stageId, kind: w.kind, reason: w.reason, pool: w.pool ?? null })), now });

    rows = await store.autoscaleRows({ active: true });
    await this.askProviders(rows, now, note);
    this.firstPass = false;

    rows = await store.autoscaleRows({ active: true });
    const report: AutoscalePassReport = { decisions, pools: [], gpuSeconds: [] };
    for (const pool of this.o.pools) {
      const mine = rows.filter((r) => r.pool === pool.name);
      const count = (...states: MachineLifecycle[]) => mine.filter((r) => states.includes(r.lifecycle)).length;
      report.pools.push({
        pool: pool.name,
        desired: count(MachineLifecycle.provisioning, MachineLifecycle.joining, MachineLifecycle.ready),
        current: count(MachineLifecycle.ready),
        starting: count(MachineLifecycle.provisioning, MachineLifecycle.joining),
      });
    }
    report.gpuSeconds = this.gpuSeconds(rows, snapshot.machines, now);
    this.lastPassAt = now;
    return report;
  }

  /** What waits: the scheduler's own planner over every ready shape's queue head (generously deep), with the pass's options. */
  private async plan(now: number): Promise<{ snapshot: SchedulerSnapshot; plan: Plan }> {
    const { store } = this.o;
    const cluster = await store.clusterView();
    const shapes = await store.readyShapes({ now });
    const limit = this.o.headLimit ?? DEFAULT_HEAD_LIMIT;
    const queue = shapes.length > 0 ? await store.queueHeads({ now, shapes: shapes.map((s) => ({ shape: s.shape, limit })) }) : [];
    const teams = await store.schedulerTeams({ usage: true });
    const running = await store.preemptionView();
    const snapshot: SchedulerSnapshot = {
      clusterVersion: cluster.version,
      machines: cluster.machines,
      queue,
      teams,
      now,
      ...(running.length ? { running, ...(this.o.preemptionCooldownMs !== undefined ? { preemptionCooldownMs: this.o.preemptionCooldownMs } : {}) } : {}),
    };
    const plan = planPlacements(snapshot, {
      ...this.planOptions(),
      // Every stage read is placed or said pending: none is cut off unreported.
      maxPlacements: Math.max(DEFAULT_MAX_PLACEMENTS, queue.length),
      ...(this.o.recentWorkload ? { targetWorkload: this.o.recentWorkload.observe(snapshot) } : {}),
    });
    return { snapshot, plan };
  }

  /** As the server's scheduler pass plans: gangs whole (docs/gangs.md), so a waiting gang is seen as such, not as GANGS_NOT_APPLIED. */
  private planOptions(): PlanOptions {
    return { gangs: true, ...(this.o.gpuPolicy !== undefined ? { gpuPolicy: this.o.gpuPolicy } : {}) };
  }

  private async applyDown(step: ScaleDownStep, now: number, note: (d: AutoscaleDecision) => void): Promise<void> {
    const { store } = this.o;
    const p = { name: step.name, reason: step.reason, now };
    let action: AutoscaleDecision['action'];
    let changed: boolean;
    switch (step.action) {
      case ScaleDownAction.drain:
        action = 'drain';
        ({ changed } = await store.autoscaleDrain(p));
        break;
      case ScaleDownAction.keep:
        action = 'keep';
        ({ changed } = await store.autoscaleKeep(p));
        break;
      case ScaleDownAction.release:
      case ScaleDownAction.releaseFailed:
        action = 'release';
        ({ changed } = await store.autoscaleRelease(p));
        break;
      case ScaleDownAction.fail:
        action = 'fail';
        ({ changed } = await store.autoscaleFail(p));
        break;
    }
    // Refused: the row moved since it was read (an agent registered, an attempt was placed before
    // the cordon took): the next pass sees it as it is now.
    if (changed) note({ pool: step.pool, action, names: [step.name], reason: step.reason });
  }

  /**
   * The provider's side of the rows: starts written and not yet answered (after a restart too),
   * the local provider's machines again on a process's first pass, stops not yet confirmed.
   */
  private async askProviders(rows: readonly AutoscaleRow[], now: number, note: (d: AutoscaleDecision) => void): Promise<void> {
    const { store } = this.o;
    const toStart = new Map<string, AutoscaleRow[]>();
    const toStop = new Map<string, AutoscaleRow[]>();
    for (const r of rows) {
      const pool = this.byName.get(r.pool);
      if (pool === undefined) continue;
      const restart =
        this.firstPass &&
        pool.autoscale.provider === ScaleProvider.local &&
        (r.lifecycle === MachineLifecycle.joining || r.lifecycle === MachineLifecycle.ready || r.lifecycle === MachineLifecycle.draining);
      if ((r.lifecycle === MachineLifecycle.provisioning && r.requestedAt === null) || restart) toStart.set(r.pool, [...(toStart.get(r.pool) ?? []), r]);
      if (r.lifecycle === MachineLifecycle.released && r.stoppedAt === null) toStop.set(r.pool, [...(toStop.get(r.pool) ?? []), r]);
    }
    const join = toStart.size > 0 ? await this.o.join() : null;
    for (const [poolName, asked] of toStart) {
      const pool = this.byName.get(poolName)!;
      const provider = this.o.providers.get(poolName);
      const names = asked.map((r) => r.name);
      if (provider === undefined) throw new Error(`autoscaler: pool ${poolName} has no provider`);
      let started: Set<string>;
      const ids = new Map<string, string | null>();
      try {
        const answer = await provider.start({ pool: poolName, template: pool.template, names, ...join! });
        for (const m of answer) ids.set(m.name, m.providerId ?? null);
        started = new Set(answer.map((m) => m.name));
      } catch (err) {
        // Not a refusal: the server is stopping. The rows stay unanswered, asked again by the next process.
        if (err instanceof ProviderClosedError) {
          this.o.log.warn({ pool: poolName, machines: names }, `autoscaler: ${err.message}; the next start of the server asks again`);
          return;
        }
        // The provider said why it started nothing: every machine asked fails with its words.
        for (const r of asked)
          if (r.lifecycle === MachineLifecycle.provisioning) await this.fail(r, `the provider refused the start: ${errorText(err)}`, now, note);
        if (asked.some((r) => r.lifecycle !== MachineLifecycle.provisioning))
          this.o.log.warn({ pool: poolName, err: errorText(err) }, 'autoscaler: could not restart the local machines after a restart of the server');
        continue;
      }
      for (const r of asked) {
        if (!started.has(r.name)) {
          if (r.lifecycle === MachineLifecycle.provisioning) await this.fail(r, 'the provider did not start it (its answer left it out)', now, note);
          continue;
        }
        if (r.lifecycle === MachineLifecycle.provisioning) await store.autoscaleRequested({ name: r.name, providerId: ids.get(r.name) ?? null, now });
      }
      const restarted = asked.filter((r) => r.lifecycle !== MachineLifecycle.provisioning && started.has(r.name)).map((r) => r.name);
      if (restarted.length) this.o.log.info({ pool: poolName, machines: restarted }, 'autoscaler: local machines started again after a restart of the server');
    }
    for (const [poolName, stopping] of toStop) {
      const provider = this.o.providers.get(poolName);
      if (provider === undefined) throw new Error(`autoscaler: pool ${poolName} has no provider`);
      try {
        const stopped = new Set(await provider.stop({ pool: poolName, machines: stopping.map((r) => ({ name: r.name, providerId: r.providerId })) }));
        const names = stopping.filter((r) => stopped.has(r.name)).map((r) => r.name);
        for (const name of names) await store.autoscaleStopped({ name, now });
        if (names.length) note({ pool: poolName, action: 'stop', names, reason: `the provider stopped ${names.join(', ')}` });
      } catch (err) {
        // Asked again next pass: a stop is idempotent.
        this.o.log.warn(
          { pool: poolName, machines: stopping.map((r) => r.name), err: errorText(err) },
          'autoscaler: the provider could not stop machines; asking again next pass',
        );
      }
    }
  }

  private async fail(r: AutoscaleRow, reason: string, now: number, note: (d: AutoscaleDecision) => void): Promise<void> {
    const { changed } = await this.o.store.autoscaleFail({ name: r.name, reason, now });
    if (changed) note({ pool: r.pool, action: 'fail', names: [r.name], reason: `${r.name}: ${reason}` });
  }

  private gpuSeconds(rows: readonly AutoscaleRow[], machines: ClusterView['machines'], now: number): AutoscalePassReport['gpuSeconds'] {
    const seconds = this.lastPassAt === null ? 0 : Math.max(0, now - this.lastPassAt) / 1000;
    const byId = new Map(machines.map((m) => [m.id, m]));
    return this.o.pools.map((pool) => {
      let provisioned = 0;
      let idle = 0;
      for (const r of rows) {
        if (r.pool !== pool.name || (r.lifecycle !== MachineLifecycle.ready && r.lifecycle !== MachineLifecycle.draining)) continue;
        const m = r.machineId === null ? undefined : byId.get(r.machineId);
        if (m === undefined) continue;
        provisioned += m.gpus.length * seconds;
        for (const g of m.gpus) idle += (gpuFreeMilli(g) / GPU_MILLI_WHOLE) * seconds;
      }
      return { pool: pool.name, provisioned, idle };
    });
  }
}
