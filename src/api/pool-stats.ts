import { machinePool } from '../domain/machine-pool.js';
import { GPU_MILLI_WHOLE, gpuMilliUsed, normalizeGpuType } from '../domain/resources.js';
import { stageReasonNow } from '../scheduler/stage-reason-now.js';
import { TeamLedger, teamOf } from '../scheduler/team-ledger.js';
import { waitReasonKind } from '../scheduler/wait-reason-kind.js';
import type { MachineView } from '../scheduler/snapshot.js';
import type { Store } from '../store/store.js';
import type { PoolPoint, PoolView, PoolWaitReason } from './contract/pool-view.js';
import { quotaNeedOf } from './quota-reasons.js';

type PoolReads = Pick<Store, 'clusterView' | 'queueStats' | 'readyShapes' | 'schedulerTeams'>;

/**
 * Every pool now, as the pools page shows it: its queue (depth, oldest wait), why its stages wait
 * (grouped by the code `gantry_stages_pending` uses, with the scheduler's sentence for the largest
 * group), and what its machines hold. One read of machines and queues by shape, so it costs the
 * shapes waiting, not the stages; with `reasons`, also the teams (a team at its quota waits on
 * that first, as the scheduler's pass decides: quota-reasons.ts).
 */
export async function poolsNow(store: PoolReads, now: number, opts: { reasons: boolean }): Promise<PoolView[]> {
  const [{ machines }, queues] = [await store.clusterView(), await store.queueStats()];
  const pools = new Map<string, PoolView>();
  const pool = (name: string): PoolView => {
    let p = pools.get(name);
    if (!p) {
      p = {
        pool: name,
        queued: 0,
        oldestWaitSeconds: null,
        reasons: [],
        machines: { total: 0, ready: 0, eligible: 0 },
        cpu: { allocated: 0, total: 0 },
        memory: { allocated: 0, total: 0 },
        gpus: [],
      };
      pools.set(name, p);
    }
    return p;
  };
  for (const m of machines) addMachine(pool(machinePool(m)), m);
  // Summed in thousandths (exact), shown as GPUs.
  for (const p of pools.values()) for (const g of p.gpus) g.allocated /= GPU_MILLI_WHOLE;
  for (const q of queues) {
    const p = pool(q.pool);
    p.queued += q.ready;
    const waited = Math.max(0, (now - q.oldestReadySince) / 1000);
    p.oldestWaitSeconds = Math.max(p.oldestWaitSeconds ?? 0, waited);
  }
  if (opts.reasons && queues.length > 0) await addReasons(store, now, machines, queues, pool);
  return [...pools.values()].sort((a, b) => (a.pool === 'cpu' ? -1 : b.pool === 'cpu' ? 1 : a.pool < b.pool ? -1 : 1));
}

/** What the history keeps of a pool: its queue and allocation, without the reasons. */
export function poolPoint(p: PoolView): PoolPoint {
  const gpus = p.gpus.reduce((s, g) => ({ allocated: s.allocated + g.allocated, total: s.total + g.total }), { allocated: 0, total: 0 });
  // Rows of several types are thousandths each: rounded there, a float sum's dust goes.
  gpus.allocated = Math.round(gpus.allocated * GPU_MILLI_WHOLE) / GPU_MILLI_WHOLE;
  return {
    pool: p.pool,
    queued: p.queued,
    oldestWaitSeconds: p.oldestWaitSeconds,
    cpuAllocated: p.cpu.allocated,
    cpuTotal: p.cpu.total,
    gpusAllocated: gpus.allocated,
    gpusTotal: gpus.total,
  };
}

function addMachine(p: PoolView, m: MachineView): void {
  p.machines.total += 1;
  if (m.health === 'ready') p.machines.ready += 1;
  if (m.health === 'ready' && m.scheduling === 'eligible') p.machines.eligible += 1;
  p.cpu.total += m.cpuMillisTotal;
  p.cpu.allocated += m.cpuMillisTotal - m.cpuMillisFree;
  p.memory.total += m.memoryBytesTotal;
  p.memory.allocated += m.memoryBytesTotal - m.memoryBytesFree;
  for (const g of m.gpus) {
    const type = normalizeGpuType(g.type);
    let row = p.gpus.find((x) => x.type === type);
    if (!row) p.gpus.push((row = { type, allocated: 0, total: 0 }));
    row.total += 1;
    // A share counts its part of a GPU (issue 29), in thousandths until poolsNow divides.
    row.allocated += gpuMilliUsed(g);
  }
}

async function addReasons(
  store: PoolReads,
  now: number,
  machines: MachineView[],
  queues: Awaited<ReturnType<Store['queueStats']>>,
  pool: (name: string) => PoolView,
): Promise<void> {
  const shapes = new Map((await store.readyShapes({ now })).map((s) => [s.shape, s]));
  const ledger = new TeamLedger(await store.schedulerTeams({ usage: true }), machines);
  // Per pool and kind: the stages, and the sentence of the shape with the most of them.
  const groups = new Map<string, Map<string, { stages: number; top: number; message: string }>>();
  for (const q of queues) {
    const shape = shapes.get(q.shape);
    let kind = 'unknown';
    let message = 'its shape left the queue while this was read';
    if (shape) {
      const quota = shape.preemptible ? null : ledger.withinQuota(teamOf(shape), quotaNeedOf(shape), machines);
      // More than the team's whole quota is a wait of its own: no work of the team ending frees it.
      kind = quota?.blocked ? (quota.never ? 'quota-never' : 'quota') : waitReasonKind(shape, machines);
      message = quota?.blocked ?? stageReasonNow(shape, machines) ?? 'a machine has room now: the next scheduler pass places it';
    }
    const byKind = groups.get(q.pool) ?? new Map();
    groups.set(q.pool, byKind);
    const g = byKind.get(kind) ?? { stages: 0, top: 0, message };
    g.stages += q.ready;
    if (q.ready > g.top) Object.assign(g, { top: q.ready, message });
    byKind.set(kind, g);
  }
  for (const [name, byKind] of groups) {
    const reasons: PoolWaitReason[] = [...byKind].map(([kind, g]) => ({ kind, stages: g.stages, message: g.message }));
    pool(name).reasons = reasons.sort((a, b) => b.stages - a.stages || (a.kind < b.kind ? -1 : 1));
  }
}
