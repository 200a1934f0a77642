import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { poolOf, type Resources } from '../domain/resources.js';
import { stageReasonNow } from './stage-reason-now.js';
import type { GpuView, MachineView, QueuedStage } from './snapshot.js';
import { GANG_MACHINES, WAIT_REASON_KINDS, waitReasonKind } from './wait-reason-kind.js';

const Gi = 1024 ** 3;

function machine(name: string, p: Partial<MachineView> = {}): MachineView {
  return {
    id: `id-${name}`,
    name,
    health: 'ready',
    scheduling: 'eligible',
    region: null,
    labels: {},
    gpus: [],
    cpuMillisTotal: 64_000,
    memoryBytesTotal: 512 * Gi,
    cpuMillisFree: 64_000,
    memoryBytesFree: 512 * Gi,
    ...p,
  };
}

const gpus = (n: number, busy: number[] = [], type = 'h100'): GpuView[] =>
  Array.from({ length: n }, (_, index) => ({ index, type, free: !busy.includes(index) }));

function stage(p: { machines?: number; gpu?: Resources['gpu']; sameLabel?: string } = {}): Pick<QueuedStage, 'resources' | 'placement'> {
  const resources: Resources = { cpuMillis: 1000, memoryBytes: Gi, gpu: p.gpu === undefined ? { count: 1, types: ['h100'] } : p.gpu };
  if (p.machines !== undefined) resources.machines = p.machines;
  return { resources, placement: { region: null, labels: {}, ...(p.sameLabel !== undefined ? { sameLabel: p.sameLabel } : {}) } };
}

describe('waitReasonKind', () => {
  it('one stage: placeable when a machine has room, else the busy code, else the static one', () => {
    const one = stage();
    expect(waitReasonKind(one, [machine('a', { gpus: gpus(8) })])).toBe('placeable');
    expect(waitReasonKind(one, [machine('a', { gpus: gpus(1, [0]) }), machine('c')])).toBe('gpu-busy');
    expect(waitReasonKind(one, [machine('c'), machine('d')])).toBe('gpu-type');
    expect(waitReasonKind(one, [])).toBe('no-machines');
    expect(poolOf(one.resources)).toBe('gpu:h100');
  });

  it('a gang of 4 with one machine free is not placeable: it waits for busy GPUs, as its sentence says', () => {
    const gang = stage({ machines: 4 });
    // Four machines of one GPU: one free, three busy.
    const machines = ['m1', 'm2', 'm3', 'm4'].map((n, i) => machine(n, { gpus: gpus(1, i === 0 ? [] : [0]) }));
    expect(waitReasonKind(gang, machines)).toBe('gpu-busy');
    expect(stageReasonNow(gang, machines)).toBe('needs 4 machines with 1 free h100 GPU: 1 has them');
    // One stage of the same member is placeable there.
    expect(waitReasonKind(stage(), machines)).toBe('placeable');
    // All four free: the gang is placeable, and its sentence is none.
    const idle = machines.map((m) => ({ ...m, gpus: gpus(1) }));
    expect(waitReasonKind(gang, idle)).toBe('placeable');
    expect(stageReasonNow(gang, idle)).toBeNull();
  });

  it('a gang on too few machines, or not that many in one label value, is gang-machines: no one machine lacks anything', () => {
    const gang = stage({ machines: 3 });
    const two = [machine('m1', { gpus: gpus(8) }), machine('m2', { gpus: gpus(8) })];
    expect(waitReasonKind(gang, two)).toBe(GANG_MACHINES);
    expect(stageReasonNow(gang, two)).toBe('needs 3 machines with 1 h100 GPU: only 2 could run a member even idle');
    // With machines that lack the GPU type beside them: still the gang's count, not their code.
    expect(waitReasonKind(gang, [...two, machine('c1'), machine('c2'), machine('c3')])).toBe(GANG_MACHINES);
    // Three machines, but two racks: one rack of two and one of one.
    const racked = stage({ machines: 3, sameLabel: 'rack' });
    const split = [
      machine('m1', { gpus: gpus(8), labels: { rack: 'a' } }),
      machine('m2', { gpus: gpus(8), labels: { rack: 'a' } }),
      machine('m3', { gpus: gpus(8), labels: { rack: 'b' } }),
    ];
    expect(waitReasonKind(racked, split)).toBe(GANG_MACHINES);
    expect(waitReasonKind(gang, split)).toBe('placeable');
    // One rack of three, all busy: it waits for room.
    const oneRack = split.map((m) => ({ ...m, labels: { rack: 'a' }, gpus: gpus(1, [0]) }));
    expect(waitReasonKind(racked, oneRack)).toBe('gpu-busy');
    expect(WAIT_REASON_KINDS).toContain(GANG_MACHINES);
  });

  it('a gang no machine could run a member of says the static code most machines give', () => {
    const gang = stage({ machines: 2, gpu: { count: 16, types: ['h100'] } });
    expect(waitReasonKind(gang, [machine('m1', { gpus: gpus(8) }), machine('m2', { gpus: gpus(8) }), machine('c1')])).toBe('gpu-total');
    expect(waitReasonKind(gang, [])).toBe('no-machines');
  });

  it('a CPU gang waiting for busy CPUs says cpu-busy', () => {
    const gang = stage({ machines: 2, gpu: null });
    const busy = [machine('c1', { cpuMillisFree: 0 }), machine('c2', { cpuMillisFree: 0 })];
    expect(waitReasonKind(gang, busy)).toBe('cpu-busy');
    expect(waitReasonKind(gang, [busy[0]!, machine('c2')])).toBe('cpu-busy');
    expect(waitReasonKind(gang, [machine('c1'), machine('c2')])).toBe('placeable');
  });

  it('agrees with the sentence: placeable exactly when stageReasonNow has none, for stages and gangs alike', () => {
    const arb = fc.record({
      machines: fc.array(
        fc.record({
          gpus: fc.integer({ min: 0, max: 8 }),
          busy: fc.integer({ min: 0, max: 8 }),
          cpuFree: fc.integer({ min: 0, max: 64 }),
          rack: fc.constantFrom('a', 'b'),
        }),
        { maxLength: 6 },
      ),
      size: fc.integer({ min: 1, max: 4 }),
      gpuCount: fc.integer({ min: 0, max: 4 }),
      sameLabel: fc.boolean(),
    });
    fc.assert(
      fc.property(arb, (p) => {
        const machines = p.machines.map((m, i) =>
          machine(`m${i}`, {
            gpus: gpus(
              m.gpus,
              Array.from({ length: m.busy }, (_, j) => j),
            ),
            cpuMillisFree: m.cpuFree * 1000,
            labels: { rack: m.rack },
          }),
        );
        const s = stage({
          gpu: p.gpuCount > 0 ? { count: p.gpuCount, types: ['h100'] } : null,
          ...(p.size > 1 ? { machines: p.size, ...(p.sameLabel ? { sameLabel: 'rack' } : {}) } : {}),
        });
        const kind = waitReasonKind(s, machines);
        expect(WAIT_REASON_KINDS).toContain(kind);
        expect(kind === 'placeable').toBe(stageReasonNow(s, machines) === null);
      }),
      { numRuns: 500 },
    );
  });
});
