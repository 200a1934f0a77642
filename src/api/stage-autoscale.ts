import type { AutoscaleRow, AutoscaleStore, AutoscaleWait } from '../autoscale/autoscale-row.js';
import type { PoolTemplate } from '../autoscale/pool-template.js';
import type { StageAutoscaleView } from './contract/autoscale-view.js';

/**
 * What the autoscaler says of a ready stage, for `explain`: a machine held for it (starting, or
 * joined and about to take it), else its latest word on why it starts nothing. Nothing is read
 * when no pool is autoscaled: explain costs what it did before issue 30.
 */
export async function stageAutoscale(
  store: Pick<AutoscaleStore, 'autoscaleRows' | 'autoscaleWaitOf'>,
  pools: readonly PoolTemplate[],
  stageId: string,
  now: number,
): Promise<StageAutoscaleView | null> {
  if (pools.length === 0) return null;
  const rows = await store.autoscaleRows({ active: true });
  const held = rows.find((r) => r.heldFor.includes(stageId) && (r.lifecycle === 'provisioning' || r.lifecycle === 'joining' || r.lifecycle === 'ready'));
  return stageAutoscaleView({ held: held ?? null, wait: held ? null : await store.autoscaleWaitOf({ stageId }), pools, now });
}

/**
 * The sentence: "a machine of pool h100 (h100-3) is starting for it, up to 600 s (started 42 s
 * ago)", "a machine of pool h100 (h100-3) joined for it: …", or the autoscaler's reason for
 * starting none ("no template has a100 GPUs"). Pure.
 */
export function stageAutoscaleView(p: {
  held: AutoscaleRow | null;
  wait: AutoscaleWait | null;
  pools: readonly PoolTemplate[];
  now: number;
}): StageAutoscaleView | null {
  const { held, wait } = p;
  if (held) {
    const started = `started ${Math.max(0, Math.round((p.now - held.startedAt) / 1000))} s ago`;
    if (held.lifecycle === 'ready') {
      return {
        kind: 'held',
        message: `a machine of pool ${held.pool} (${held.name}) joined for it: the next scheduler pass places it there (${started})`,
        pool: held.pool,
        machine: held.name,
      };
    }
    // A pool no longer declared has no boot timeout to quote; the row still says the machine is coming.
    const boot = p.pools.find((x) => x.name === held.pool)?.autoscale.bootTimeoutSeconds;
    const upTo = boot === undefined ? '' : `, up to ${boot} s`;
    return {
      kind: 'held',
      message: `a machine of pool ${held.pool} (${held.name}) is starting for it${upTo} (${started})`,
      pool: held.pool,
      machine: held.name,
    };
  }
  if (wait) return { kind: wait.kind, message: wait.reason, pool: wait.pool, machine: null };
  return null;
}
