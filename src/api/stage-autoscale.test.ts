import { describe, expect, it } from 'vitest';
import type { AutoscaleRow, AutoscaleStore, AutoscaleWait } from '../autoscale/autoscale-row.js';
import { parsePools } from '../autoscale/pool-template.js';
import { stageAutoscale, stageAutoscaleView } from './stage-autoscale.js';

const NOW = 1_700_000_000_000;
const pools = parsePools([
  {
    name: 'h100',
    template: { cpu: 32, memory: '256Gi', gpus: { type: 'h100', count: 8 } },
    autoscale: { provider: 'local', min: 0, max: 4, idleSeconds: 300, bootTimeoutSeconds: 600 },
  },
]);

const row = (lifecycle: AutoscaleRow['lifecycle'], heldFor: string[], pool = 'h100'): AutoscaleRow => ({
  name: `${pool}-3`,
  pool,
  lifecycle,
  reason: 'r',
  startedAt: NOW - 42_000,
  requestedAt: null,
  providerId: null,
  joinedAt: null,
  machineId: null,
  drainingAt: null,
  releasedAt: null,
  stoppedAt: null,
  idleSince: null,
  attempts: 0,
  failReason: null,
  heldFor,
  updatedAt: NOW,
});

const wait: AutoscaleWait = { stageId: 's1', kind: 'gpu-type', reason: 'no template has a100 GPUs', pool: null, at: NOW - 5000 };

describe('stageAutoscaleView', () => {
  it('a machine starting for it: its pool and name, the boot timeout from the pool, how long ago it started', () => {
    for (const lifecycle of ['provisioning', 'joining'] as const) {
      expect(stageAutoscaleView({ held: row(lifecycle, ['s1']), wait: null, pools, now: NOW })).toEqual({
        kind: 'held',
        message: 'a machine of pool h100 (h100-3) is starting for it, up to 600 s (started 42 s ago)',
        pool: 'h100',
        machine: 'h100-3',
      });
    }
  });

  it('a joined machine held for it: the next pass places it there', () => {
    expect(stageAutoscaleView({ held: row('ready', ['s1']), wait: null, pools, now: NOW })?.message).toBe(
      'a machine of pool h100 (h100-3) joined for it: the next scheduler pass places it there (started 42 s ago)',
    );
  });

  it('a pool no longer declared: no boot timeout to quote', () => {
    expect(stageAutoscaleView({ held: row('joining', ['s1'], 'gone'), wait: null, pools, now: NOW })?.message).toBe(
      'a machine of pool gone (gone-3) is starting for it (started 42 s ago)',
    );
  });

  it('no machine held: the autoscaler’s reason for starting none; nothing said: null', () => {
    expect(stageAutoscaleView({ held: null, wait, pools, now: NOW })).toEqual({
      kind: 'gpu-type',
      message: 'no template has a100 GPUs',
      pool: null,
      machine: null,
    });
    expect(stageAutoscaleView({ held: null, wait: null, pools, now: NOW })).toBeNull();
  });
});

describe('stageAutoscale', () => {
  const store = (rows: AutoscaleRow[], w: AutoscaleWait | null) => {
    const asked: string[] = [];
    const s: Pick<AutoscaleStore, 'autoscaleRows' | 'autoscaleWaitOf'> = {
      autoscaleRows: async (p) => (asked.push(`rows active=${p.active}`), rows),
      autoscaleWaitOf: async (p) => (asked.push(`wait ${p.stageId}`), w),
    };
    return { s, asked };
  };

  it('reads nothing when no pool is autoscaled', async () => {
    const { s, asked } = store([row('joining', ['s1'])], wait);
    expect(await stageAutoscale(s, [], 's1', NOW)).toBeNull();
    expect(asked).toEqual([]);
  });

  it('a row holding the stage wins over a wait; a draining or failed row holds nothing; else the wait', async () => {
    const held = store([row('joining', ['s1'])], wait);
    expect((await stageAutoscale(held.s, pools, 's1', NOW))?.kind).toBe('held');
    expect(held.asked).toEqual(['rows active=true']);
    const failed = store([row('failed', ['s1'])], wait);
    expect((await stageAutoscale(failed.s, pools, 's1', NOW))?.message).toBe('no template has a100 GPUs');
    const other = store([row('joining', ['s2'])], null);
    expect(await stageAutoscale(other.s, pools, 's1', NOW)).toBeNull();
  });
});
