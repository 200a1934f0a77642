import { describe, expect, it } from 'vitest';
import type { AutoscaleMachineView, AutoscalePoolView, AutoscaleView } from '../../api/contract/autoscale-view.js';
import { renderAutoscale } from './autoscale-text.js';

const T0 = 1_700_000_000_000;

const pool: AutoscalePoolView = {
  name: 'h100',
  template: {
    cpuMillis: 32_000,
    memoryBytes: 256 * 1024 ** 3,
    gpus: { type: 'h100', count: 8 },
    region: null,
    labels: {},
    description: '8 × h100, 32 CPU, 256Gi',
  },
  provider: 'local',
  min: 0,
  max: 4,
  idleSeconds: 300,
  bootTimeoutSeconds: 600,
  spareMachines: 0,
  maxStartsPerInterval: null,
  machines: { provisioning: 1, joining: 0, ready: 1, draining: 0, failed: 1 },
  desired: 2,
  current: 1,
  starting: 1,
};

const row = (name: string, over: Partial<AutoscaleMachineView>): AutoscaleMachineView => ({
  name,
  pool: 'h100',
  lifecycle: 'ready',
  reason: '1 stage of team vision waits for 8 h100 GPUs: starting 1 machine of template h100',
  startedAt: T0 - 600_000,
  requestedAt: T0 - 590_000,
  providerId: null,
  joinedAt: T0 - 480_000,
  machineId: 'm1',
  drainingAt: null,
  releasedAt: null,
  stoppedAt: null,
  idleSince: null,
  attempts: 1,
  failReason: null,
  heldFor: [],
  updatedAt: T0 - 480_000,
  ...over,
});

const view: AutoscaleView = {
  at: T0,
  pools: [pool],
  machines: [
    row('h100-1', {}),
    row('h100-2', {
      lifecycle: 'provisioning',
      startedAt: T0 - 42_000,
      requestedAt: null,
      joinedAt: null,
      machineId: null,
      attempts: 0,
      heldFor: ['s1', 's2'],
    }),
    row('h100-3', { lifecycle: 'failed', failReason: 'did not join within 600 s', updatedAt: T0 - 5_000, joinedAt: null, attempts: 0 }),
    row('h100-0', { lifecycle: 'released', releasedAt: T0 - 60_000 }),
  ],
  decisions: [
    { seq: 9, at: T0 - 5_000, type: 'autoscale:fail', pool: 'h100', machine: 'h100-3', message: 'machine h100-3 did not join within 600 s: failed' },
    {
      seq: 8,
      at: T0 - 42_000,
      type: 'autoscale:start',
      pool: 'h100',
      machine: null,
      message: '2 stages wait for 8 h100 GPUs: starting 1 machine of template h100',
    },
  ],
};

describe('renderAutoscale', () => {
  it('prints each pool, the machines not released with their lifecycle and holds, then the decisions newest first', () => {
    const lines = renderAutoscale(view, T0, { color: false }).split('\n');
    expect(lines[0]).toMatch(/^POOL\s+PROVIDER\s+MIN\/MAX\s+DESIRED\s+CURRENT\s+STARTING\s+DRAINING\s+FAILED\s+TEMPLATE$/);
    expect(lines[1]).toMatch(/^h100\s+local\s+0\/4\s+2\s+1\s+1\s+0\s+1\s+8 × h100, 32 CPU, 256Gi$/);
    expect(lines[3]).toMatch(/^MACHINE\s+POOL\s+LIFECYCLE\s+SINCE\s+HELD\s+ATTEMPTS\s+FAILED$/);
    expect(lines[4]).toMatch(/^h100-1\s+h100\s+ready\s+8m ago\s+0\s+1\s+-$/);
    expect(lines[5]).toMatch(/^h100-2\s+h100\s+provisioning\s+42s ago\s+2\s+0\s+-$/);
    expect(lines[6]).toMatch(/^h100-3\s+h100\s+failed\s+5s ago\s+0\s+0\s+did not join within 600 s$/);
    // Released machines stay in --json for an hour, not in the table.
    expect(lines.join('\n')).not.toContain('h100-0');
    expect(lines.slice(8)).toEqual([
      'Latest decisions (2 of 2, newest first):',
      '  5s ago   fail      machine h100-3 did not join within 600 s: failed',
      '  42s ago  start     2 stages wait for 8 h100 GPUs: starting 1 machine of template h100',
    ]);
  });

  it('prints only as many decisions as asked', () => {
    const text = renderAutoscale(view, T0, { color: false, decisions: 1 });
    expect(text).toContain('Latest decisions (1 of 2, newest first):');
    expect(text).not.toContain('starting 1 machine');
  });

  it('says when a pool has no machine, and prints nothing of pools when none is autoscaled', () => {
    expect(renderAutoscale({ ...view, machines: [], decisions: [] }, T0, { color: false })).toContain('no autoscaled machine is running');
    expect(renderAutoscale({ at: T0, pools: [], machines: [], decisions: [], note: 'no pool is autoscaled' }, T0, { color: false })).toBe('');
  });
});
