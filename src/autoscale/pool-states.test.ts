import { describe, expect, it } from 'vitest';
import type { AutoscaleRow } from './autoscale-row.js';
import { BOOT_BACKOFF } from './boot-backoff.js';
import { parsePools } from './pool-template.js';
import { poolStates, scaledMachines } from './pool-states.js';

const pools = parsePools([
  {
    name: 'g',
    template: { cpu: 8, memory: '32Gi', gpus: { type: 'h100', count: 4 } },
    autoscale: { provider: 'local', min: 0, max: 4, idleSeconds: 60, bootTimeoutSeconds: 100 },
  },
]);
const T = 1_700_000_000_000;

function row(name: string, over: Partial<AutoscaleRow>): AutoscaleRow {
  return {
    name,
    pool: 'g',
    lifecycle: 'ready',
    reason: 'r',
    startedAt: T,
    requestedAt: T,
    providerId: null,
    joinedAt: T + 10_000,
    machineId: `m-${name}`,
    drainingAt: null,
    releasedAt: null,
    stoppedAt: null,
    idleSince: T + 10_000,
    attempts: 0,
    failReason: null,
    heldFor: [],
    updatedAt: T,
    ...over,
  };
}

describe('poolStates: a pool as the rows say', () => {
  it('counts by lifecycle, starts within the interval, idle machines, holds of starting ones in start order', () => {
    const rows = [
      row('g-1', { attempts: 1, idleSince: null }),
      row('g-2', {}),
      row('g-3', { lifecycle: 'draining' }),
      row('g-5', { lifecycle: 'provisioning', startedAt: T + 50_000, requestedAt: null, joinedAt: null, machineId: null, heldFor: ['s2'] }),
      row('g-4', { lifecycle: 'joining', startedAt: T + 45_000, joinedAt: null, machineId: null, heldFor: ['s1'] }),
      row('x-1', { pool: 'other' }),
    ];
    const g = poolStates(rows, pools, T + 52_000, 10_000).get('g')!;
    expect(g.state).toEqual({ pool: 'g', counted: 4, starting: 2, startedThisInterval: 2, backoffUntil: null, idle: 1, startingFor: [['s1'], ['s2']] });
    expect(g.starting.map((r) => r.name)).toEqual(['g-4', 'g-5']);
  });

  it('backs off after failures in a row, back to the latest machine that joined, dated by the rows', () => {
    const failedOld = row('g-1', {
      lifecycle: 'released',
      joinedAt: null,
      failReason: 'did not join',
      startedAt: T,
      releasedAt: T + 101_000,
      stoppedAt: T + 101_000,
    });
    const joined = row('g-2', { startedAt: T + 200_000 });
    const failed1 = row('g-3', { lifecycle: 'released', joinedAt: null, failReason: 'did not join', startedAt: T + 300_000, releasedAt: T + 450_000 });
    const failed2 = row('g-4', { lifecycle: 'failed', joinedAt: null, failReason: 'refused', startedAt: T + 500_000, updatedAt: T + 500_100 });
    const at = (rows: AutoscaleRow[]) => poolStates(rows, pools, T + 600_000, 10_000).get('g')!.state.backoffUntil;
    // Two in a row since g-2 joined: 60 s after the latest failure (its row's last change, while failed).
    expect(at([failedOld, joined, failed1, failed2])).toBe(T + 500_100 + 2 * BOOT_BACKOFF.baseMs);
    // Released, a failure is dated by its boot timeout's end (before its release, a pass later).
    expect(at([failedOld, joined, failed1])).toBe(T + 400_000 + BOOT_BACKOFF.baseMs);
    // A machine that joined since: no backoff.
    expect(at([failedOld, joined])).toBeNull();
  });

  it('scale-down sees every row not released, a joined machine by its id', () => {
    const rows = [row('g-1', {}), row('g-2', { lifecycle: 'released' }), row('g-3', { lifecycle: 'provisioning', machineId: null })];
    expect(scaledMachines(rows).map((m) => [m.id, m.lifecycle])).toEqual([
      ['m-g-1', 'ready'],
      ['g-3', 'provisioning'],
    ]);
  });
});
