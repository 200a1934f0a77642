import { describe, expect, it } from 'vitest';
import type { Plan, PlannedPlacement } from '../../scheduler/snapshot.js';
import { planChunks } from './plan-chunks.js';

const one = (i: number): PlannedPlacement => ({ stageId: `s${i}`, machineId: `m${i}`, gpuIndices: [], cpuMillis: 1000, memoryBytes: 1 });
const gang = (i: number, size: number): PlannedPlacement => ({
  ...one(i),
  members: Array.from({ length: size }, (_, r) => ({ rank: r, machineId: `g${i}-${r}`, gpuIndices: [0] })),
});
const ids = (chunks: Plan[]) => chunks.map((c) => c.placements.map((p) => p.stageId));

describe('planChunks', () => {
  it('cuts the placements in plan order, at most `size` places a chunk', () => {
    const plan: Plan = { placements: Array.from({ length: 7 }, (_, i) => one(i)), pending: [] };
    expect(ids(planChunks(plan, 3))).toEqual([['s0', 's1', 's2'], ['s3', 's4', 's5'], ['s6']]);
  });

  it('never splits a gang: its members count each, and one larger than a chunk is a chunk of its own', () => {
    const plan: Plan = { placements: [one(0), gang(1, 2), one(2), gang(3, 5), one(4)], pending: [] };
    expect(ids(planChunks(plan, 3))).toEqual([['s0', 's1'], ['s2'], ['s3'], ['s4']]);
  });

  it('the preemptions with the last chunk, the planner’s account (pending, reservations) with the first, nothing dropped', () => {
    const preemptions = [{ stageId: 'p', machineId: 'm0', reason: 'r', victims: [{ attemptId: 'a', token: 1, stageId: 'v' }] }];
    const pending = [{ stageId: 'w', reason: 'no room', unplaceable: false }];
    const reservations = [{ stageId: 'w', machineId: 'm9' }];
    const chunks = planChunks({ placements: [one(0), one(1), one(2)], pending, reservations, preemptions }, 2);
    expect(chunks).toHaveLength(2);
    expect(chunks[0]).toMatchObject({ pending, reservations });
    expect(chunks[0]!.preemptions).toBeUndefined();
    expect(chunks[1]).toMatchObject({ pending: [], preemptions });
  });

  it('a plan with preemptions and no placements is one chunk', () => {
    const preemptions = [{ stageId: 'p', machineId: 'm0', reason: 'r', victims: [] }];
    expect(planChunks({ placements: [], pending: [], preemptions })).toEqual([{ placements: [], pending: [], preemptions }]);
  });
});
