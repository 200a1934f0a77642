import { describe, expect, it } from 'vitest';
import type { MachineView } from '../../api/contract/job-view.js';
import { hybridReport } from '../../../test/support/containment-report.js';
import { gpuUseText } from '../../api/contract/gpu-use.js';
import { renderMachineTable } from './machine-table.js';
import { renderMachineDetail } from './machine-detail.js';

const T0 = 1_700_000_000_000;
const gpu = (index: number, busy: boolean) => ({ index, type: 'h100', name: 'NVIDIA H100', uuid: null, busy });

const machine: MachineView = {
  id: 'm1',
  name: 'gpu-1',
  health: 'ready',
  scheduling: 'eligible',
  cpuMillis: 8000,
  memoryBytes: 16 * 1024 ** 3,
  gpus: [gpu(0, true), gpu(1, true), gpu(2, false), gpu(3, false)],
  gpusDeclared: true,
  region: 'eu-west',
  labels: { rack: 'a' },
  allocated: { cpuMillis: 3000, memoryBytes: 4 * 1024 ** 3, gpuIndices: [0, 1], attempts: 1 },
  lastHeartbeatAt: T0 - 2_000,
  registeredAt: T0 - 60_000,
};

describe('renderMachineTable', () => {
  it('shows allocation out of capacity and says when GPUs were declared', () => {
    const row = renderMachineTable([machine], T0, { color: false }).split('\n')[1] ?? '';
    expect(row).toMatch(/^gpu-1\s+ready\s+3\/8\s+4Gi\/16Gi\s+4x h100 \(declared\) 2 busy\s+\?\s+eu-west\s+rack=a\s+2s ago$/);
  });

  it('shows the heartbeat period the server gave it (it grows with the fleet), and in detail the silence it is allowed', () => {
    const grown = { ...machine, heartbeat: { periodMs: 4000, suspectAfterMs: 9000, lostAfterMs: 14_000, lostWithinMs: 15_200 } };
    expect(renderMachineTable([grown], T0, { color: false }).split('\n')[1]).toMatch(/rack=a\s+2s ago, every 4s$/);
    expect(renderMachineDetail(grown, T0, { color: false })).toMatch(
      /^heartbeat: +2s ago, every 4s: suspect after 9s silent, lost after 14s \(its work elsewhere within 15.2s\)$/m,
    );
  });

  it('shows what an operator wants of it after its health, when it is not in service', () => {
    const rows = renderMachineTable(
      [machine, { ...machine, name: 'gpu-2', scheduling: 'cordoned' }, { ...machine, name: 'gpu-3', health: 'lost', scheduling: 'drained' }],
      T0,
      { color: false },
    ).split('\n');
    expect(rows[0]).toMatch(/^NAME\s+STATUS\s+CPU/);
    expect(rows.slice(1).map((r) => r.split(/\s+/).slice(0, 2).join(' '))).toEqual(['gpu-1 ready', 'gpu-2 ready,cordoned', 'gpu-3 lost,drained']);
  });

  it('shows a dash for a CPU-only machine', () => {
    const row = renderMachineTable([{ ...machine, gpus: [], gpusDeclared: false }], T0, { color: false }).split('\n')[1] ?? '';
    expect(row).toMatch(/4Gi\/16Gi\s+-\s+\?\s+eu-west/);
  });

  it('CONTAIN: what its agent enforces, in one word; "none" when nothing; "?" when it did not say', () => {
    const report = { ...hybridReport, problems: [] };
    const rows = renderMachineTable(
      [
        { ...machine, name: 'a', containment: report },
        { ...machine, name: 'b', containment: { ...report, mechanism: 'cgroup-v1', devices: true, kill: 'freezer' } },
        { ...machine, name: 'c', containment: { ...report, mechanism: 'none', memory: false, cpu: false, pids: false, kill: 'process-group' } },
        { ...machine, name: 'd', containment: { ...report, cpu: false } },
        { ...machine, name: 'e', containment: null },
        { ...machine, name: 'f' },
      ],
      T0,
      { color: false },
    ).split('\n');
    expect(rows[0]).toMatch(/GPUS\s+CONTAIN\s+REGION/);
    // One word each, as STATUS is: no spaces inside the column.
    expect(rows.slice(1).map((r) => r.split(/\s+/)[0] + ' ' + r.split(/\s{2,}/)[5])).toEqual([
      'a mem,cpu,pids',
      'b mem,cpu,pids,dev',
      'c none',
      'd mem,pids',
      'e ?',
      'f ?',
    ]);
  });
});

describe('shares of a GPU on the machines table', () => {
  it('counts a share as its part of a GPU and says how many GPUs are shared', () => {
    const shared: MachineView = {
      ...machine,
      gpus: [
        { ...gpu(0, true), usedMilli: 500 },
        { ...gpu(1, true), usedMilli: 1000 },
        { ...gpu(2, false), usedMilli: 0 },
        { ...gpu(3, true), usedMilli: 250 },
      ],
    };
    const row = renderMachineTable([shared], T0, { color: false }).split('\n')[1] ?? '';
    expect(row).toMatch(/4x h100 \(declared\) 1\.75 used \(2 shared\)/);
    // Whole GPUs only, from a server that reports usedMilli: as before.
    const whole: MachineView = {
      ...machine,
      gpus: [
        { ...gpu(0, true), usedMilli: 1000 },
        { ...gpu(1, false), usedMilli: 0 },
      ],
    };
    expect(renderMachineTable([whole], T0, { color: false }).split('\n')[1]).toMatch(/2x h100 \(declared\) 1 busy/);
  });

  it("words one GPU's use: free, busy, or the part shares hold", () => {
    expect(gpuUseText({ ...gpu(0, false), usedMilli: 0 })).toBe('free');
    expect(gpuUseText({ ...gpu(0, true), usedMilli: 1000 })).toBe('busy');
    expect(gpuUseText({ ...gpu(0, true), usedMilli: 750 })).toBe('0.75 used by shares');
    // A server before shares: busy or free only.
    expect(gpuUseText(gpu(0, true))).toBe('busy');
  });

  it('POOL and LIFECYCLE only when the autoscaler started some machine; "-" for the others', () => {
    expect(renderMachineTable([machine], T0, { color: false })).not.toContain('LIFECYCLE');
    const rows = renderMachineTable([machine, { ...machine, name: 'h100-1', pool: 'h100', lifecycle: 'draining', scheduling: 'draining' }], T0, {
      color: false,
    }).split('\n');
    expect(rows[0]).toMatch(/^NAME\s+STATUS\s+POOL\s+LIFECYCLE\s+CPU/);
    expect(rows.slice(1).map((r) => r.split(/\s+/).slice(0, 4).join(' '))).toEqual(['gpu-1 ready - -', 'h100-1 ready,draining h100 draining']);
  });
});
