import { describe, expect, it } from 'vitest';
import type { PoolTemplate } from './pool-template.js';
import { planScaleDown, type AutoscaledMachine } from './plan-scale-down.js';

const NOW = 10_000_000;

function pool(name: string, min = 0): PoolTemplate {
  return {
    name,
    template: { cpuMillis: 32000, memoryBytes: 1, gpus: { type: 'h100', count: 8 }, region: null, labels: {} },
    autoscale: { provider: 'local', command: null, min, max: 10, idleSeconds: 300, bootTimeoutSeconds: 600, maxStartsPerInterval: null, spareMachines: 0 },
  };
}

function machine(name: string, p: Partial<AutoscaledMachine> = {}): AutoscaledMachine {
  return { id: `id-${name}`, name, pool: 'h100', lifecycle: 'ready', startedAt: NOW - 3_600_000, idleSince: NOW - 400_000, attempts: 0, ...p };
}

const actions = (steps: ReturnType<typeof planScaleDown>) => Object.fromEntries(steps.map((s) => [s.name, s.action]));

describe('planScaleDown', () => {
  it('drains a machine idle past idleSeconds, with the reason', () => {
    const steps = planScaleDown({ machines: [machine('gpu-h100-2')], pools: [pool('h100')], now: NOW });
    expect(steps).toEqual([
      {
        machineId: 'id-gpu-h100-2',
        name: 'gpu-h100-2',
        pool: 'h100',
        action: 'drain',
        from: 'ready',
        to: 'draining',
        reason: 'gpu-h100-2 idle 400 s: draining to release it',
      },
    ]);
  });

  it('drains a lost machine at once, work or not, below min too: a dead machine counted toward min and max held the pool stuck', () => {
    const lost = machine('h100-1', { lost: true, idleSince: NOW - 1000, attempts: 1 });
    const steps = planScaleDown({
      machines: [lost, machine('h100-2', { idleSince: NOW - 1000 })],
      pools: [{ ...pool('h100', 1), autoscale: { ...pool('h100', 1).autoscale, max: 1 } }],
      now: NOW,
    });
    expect(steps).toEqual([
      {
        machineId: 'id-h100-1',
        name: 'h100-1',
        pool: 'h100',
        action: 'drain',
        from: 'ready',
        to: 'draining',
        reason: 'h100-1 is lost (its heartbeats stopped): draining to release it, in its place a machine that answers',
      },
    ]);
  });

  it('a lost draining machine is not kept for the room its lost attempts still hold (no drain, keep, drain… each pass); released once empty', () => {
    const held = machine('h100-1', { lifecycle: 'draining', lost: true, idleSince: null, attempts: 1 });
    expect(planScaleDown({ machines: [held], pools: [pool('h100', 1)], now: NOW })).toEqual([]);
    expect(actions(planScaleDown({ machines: [{ ...held, attempts: 0, idleSince: NOW }], pools: [pool('h100', 1)], now: NOW }))).toEqual({
      'h100-1': 'release',
    });
  });

  it('never picks a machine with work: an attempt, a placement, a reservation, a preemption, a gang waiting', () => {
    const machines = [
      machine('attempt', { attempts: 1, idleSince: null }),
      machine('placed'),
      machine('reserved'),
      machine('preempting'),
      machine('gang', { waitsOnIt: 1 }),
      machine('young', { idleSince: NOW - 299_999 }),
    ];
    const steps = planScaleDown({
      machines,
      pools: [pool('h100')],
      now: NOW,
      plan: {
        placements: [{ stageId: 's', machineId: 'id-placed', gpuIndices: [0], cpuMillis: 1, memoryBytes: 1 }],
        pending: [],
        reservations: [{ stageId: 't', machineId: 'id-reserved' }],
        preemptions: [{ stageId: 'u', machineId: 'id-preempting', victims: [], reason: 'x' }],
      },
    });
    expect(steps).toEqual([]);
  });

  it("never drains a machine a gang member's placement is on: every member's machine is busy, not rank 0's alone", () => {
    const machines = [machine('rank0'), machine('rank1'), machine('rank2'), machine('free')];
    const steps = planScaleDown({
      machines,
      pools: [pool('h100')],
      now: NOW,
      plan: {
        placements: [
          {
            stageId: 'g',
            machineId: 'id-rank0',
            gpuIndices: [0],
            cpuMillis: 1,
            memoryBytes: 1,
            members: [
              { rank: 0, machineId: 'id-rank0', gpuIndices: [0] },
              { rank: 1, machineId: 'id-rank1', gpuIndices: [0] },
              { rank: 2, machineId: 'id-rank2', gpuIndices: [0] },
            ],
          },
        ],
        pending: [],
      },
    });
    expect(actions(steps)).toEqual({ free: 'drain' });
  });

  it('keeps min: of three idle machines with min 2, only the longest idle drains', () => {
    const machines = [machine('a', { idleSince: NOW - 500_000 }), machine('b', { idleSince: NOW - 900_000 }), machine('c', { idleSince: NOW - 600_000 })];
    expect(actions(planScaleDown({ machines, pools: [pool('h100', 2)], now: NOW }))).toEqual({ b: 'drain' });
  });

  it('machines starting count toward min', () => {
    const machines = [machine('idle'), machine('booting', { lifecycle: 'joining', startedAt: NOW - 1000, idleSince: null })];
    expect(actions(planScaleDown({ machines, pools: [pool('h100', 1)], now: NOW }))).toEqual({ idle: 'drain' });
    // Draining ones do not: they are on their way out.
    const out = [machine('idle'), machine('leaving', { lifecycle: 'draining' })];
    expect(actions(planScaleDown({ machines: out, pools: [pool('h100', 1)], now: NOW }))).toEqual({ leaving: 'release' });
  });

  it('releases a drained machine; one found with work goes back to ready', () => {
    const steps = planScaleDown({
      machines: [machine('empty', { lifecycle: 'draining' }), machine('busy', { lifecycle: 'draining', attempts: 2, idleSince: null })],
      pools: [pool('h100')],
      now: NOW,
    });
    expect(steps.map((s) => [s.name, s.action, s.to, s.reason])).toEqual([
      ['empty', 'release', 'released', 'empty drained: releasing it'],
      ['busy', 'keep', 'ready', 'busy has work again: back in service'],
    ]);
  });

  it('fails a machine that did not join within its boot timeout, and releases a failed one', () => {
    const steps = planScaleDown({
      machines: [
        machine('late', { lifecycle: 'provisioning', startedAt: NOW - 600_000, idleSince: null }),
        machine('on-time', { lifecycle: 'joining', startedAt: NOW - 599_999, idleSince: null }),
        machine('broken', { lifecycle: 'failed', idleSince: null }),
        machine('gone', { lifecycle: 'released' }),
      ],
      pools: [pool('h100')],
      now: NOW,
    });
    expect(steps.map((s) => [s.name, s.action, s.reason])).toEqual([
      ['late', 'fail', 'late did not join within 600 s: failed, releasing it'],
      ['broken', 'release-failed', 'broken failed to join: releasing it'],
    ]);
  });

  it('a pool above its max drains idle machines at once, down to max; busy ones stay', () => {
    const lowered = { ...pool('h100'), autoscale: { ...pool('h100').autoscale, max: 1 } };
    const machines = [
      machine('busy', { attempts: 1, idleSince: null }),
      machine('fresh', { idleSince: NOW - 1000 }),
      machine('fresher', { idleSince: NOW - 10 }),
    ];
    const steps = planScaleDown({ machines, pools: [lowered], now: NOW });
    expect(steps.map((s) => [s.name, s.action, s.reason])).toEqual([
      ['fresh', 'drain', 'pool h100 has 3 machines, above its max 1: draining idle fresh'],
      ['fresher', 'drain', 'pool h100 has 2 machines, above its max 1: draining idle fresher'],
    ]);
  });

  it("keeps the pool's spare machines idle", () => {
    const spare = { ...pool('h100'), autoscale: { ...pool('h100').autoscale, spareMachines: 1 } };
    const machines = [
      machine('a', { idleSince: NOW - 900_000 }),
      machine('b', { idleSince: NOW - 500_000 }),
      machine('busy', { attempts: 1, idleSince: null }),
    ];
    expect(actions(planScaleDown({ machines, pools: [spare], now: NOW }))).toEqual({ a: 'drain' });
  });

  it('leaves alone machines of a pool no longer declared', () => {
    expect(planScaleDown({ machines: [machine('orphan', { pool: 'old' })], pools: [pool('h100')], now: NOW })).toEqual([]);
  });
});
