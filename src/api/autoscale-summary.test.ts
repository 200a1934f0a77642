import { describe, expect, it } from 'vitest';
import type { AutoscaleRow } from '../autoscale/autoscale-row.js';
import { parsePools } from '../autoscale/pool-template.js';
import type { EventRecord } from '../store/records.js';
import { autoscaleSummary, NO_POOLS_NOTE, RELEASED_SHOWN_MS } from './autoscale-summary.js';

const NOW = 1_700_000_000_000;
const pools = parsePools([
  {
    name: 'h100',
    template: { cpu: 32, memory: '256Gi', gpus: { type: 'H100', count: 8 }, region: 'us-east', labels: { disk: 'ssd' } },
    autoscale: { provider: 'local', min: 0, max: 4, idleSeconds: 300, bootTimeoutSeconds: 600, spareMachines: 1 },
  },
  {
    name: 'cpu',
    template: { cpu: 16, memory: '64Gi' },
    autoscale: { provider: 'command', command: './up.sh', min: 1, max: 20, idleSeconds: 120, bootTimeoutSeconds: 300 },
  },
]);

const row = (name: string, pool: string, lifecycle: AutoscaleRow['lifecycle'], over: Partial<AutoscaleRow> = {}): AutoscaleRow => ({
  name,
  pool,
  lifecycle,
  reason: 'r',
  startedAt: NOW - 1000,
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
  heldFor: [],
  updatedAt: NOW - 1000,
  ...over,
});

const event = (seq: number, type: string, data: Record<string, unknown>): EventRecord => ({
  seq,
  at: NOW - seq,
  type,
  jobId: null,
  stageName: null,
  attemptId: null,
  machineId: null,
  message: `${type} ${seq}`,
  data,
});

describe('autoscaleSummary', () => {
  it('counts each pool’s machines by lifecycle: desired = provisioning + joining + ready, current = ready, starting = provisioning + joining', () => {
    const rows = [
      row('h100-1', 'h100', 'provisioning'),
      row('h100-2', 'h100', 'joining'),
      row('h100-3', 'h100', 'ready'),
      row('h100-4', 'h100', 'draining'),
      row('h100-5', 'h100', 'failed'),
      row('h100-6', 'h100', 'released', { releasedAt: NOW - 10 }),
      row('cpu-1', 'cpu', 'ready'),
    ];
    const v = autoscaleSummary({ pools, rows, events: [], now: NOW });
    expect(v.note).toBeUndefined();
    expect(v.pools.map((p) => [p.name, p.machines, p.desired, p.current, p.starting])).toEqual([
      ['h100', { provisioning: 1, joining: 1, ready: 1, draining: 1, failed: 1 }, 3, 1, 2],
      ['cpu', { provisioning: 0, joining: 0, ready: 1, draining: 0, failed: 0 }, 1, 1, 0],
    ]);
    expect(v.pools[0]).toMatchObject({
      provider: 'local',
      min: 0,
      max: 4,
      idleSeconds: 300,
      bootTimeoutSeconds: 600,
      spareMachines: 1,
      maxStartsPerInterval: null,
      template: { gpus: { type: 'h100', count: 8 }, region: 'us-east', labels: { disk: 'ssd' }, description: '8 × h100, 32 CPU, 256Gi' },
    });
    expect(v.pools[1]!.provider).toBe('command');
  });

  it('lists machines not released, and released ones for an hour only', () => {
    const rows = [
      row('h100-1', 'h100', 'released', { releasedAt: NOW - RELEASED_SHOWN_MS - 1 }),
      row('h100-2', 'h100', 'released', { releasedAt: NOW - RELEASED_SHOWN_MS + 1 }),
      row('h100-3', 'h100', 'ready'),
    ];
    expect(autoscaleSummary({ pools, rows, events: [], now: NOW }).machines.map((m) => m.name)).toEqual(['h100-2', 'h100-3']);
  });

  it('decisions: the autoscale:* events as given (newest first), with the pool and machine their data names', () => {
    const events = [
      event(3, 'autoscale:drain', { pool: 'h100', name: 'h100-2', from: 'ready', to: 'draining' }),
      event(2, 'machine:lost', {}),
      event(1, 'autoscale:start', { pool: 'h100', names: ['h100-1', 'h100-2'] }),
    ];
    expect(autoscaleSummary({ pools, rows: [], events, now: NOW }).decisions).toEqual([
      { seq: 3, at: NOW - 3, type: 'autoscale:drain', pool: 'h100', machine: 'h100-2', message: 'autoscale:drain 3' },
      { seq: 1, at: NOW - 1, type: 'autoscale:start', pool: 'h100', machine: null, message: 'autoscale:start 1' },
    ]);
  });

  it('no pool configured: no pools, and a note that says so and how to declare one; rows of pools since removed are still listed', () => {
    const v = autoscaleSummary({ pools: [], rows: [row('old-1', 'old', 'ready')], events: [], now: NOW });
    expect(v.pools).toEqual([]);
    expect(v.note).toBe(NO_POOLS_NOTE);
    expect(v.note).toMatch(/no pool is autoscaled/);
    expect(v.machines.map((m) => m.name)).toEqual(['old-1']);
  });
});
