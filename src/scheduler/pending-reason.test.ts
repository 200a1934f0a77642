import { describe, expect, it } from 'vitest';
import type { StageNeed } from './checks.js';
import { explainPlacement } from './explain-placement.js';
import { pendingReasonNow } from './pending-reason.js';
import type { MachineView } from './snapshot.js';

const need: StageNeed = {
  cpuMillis: 1000,
  memoryBytes: 2 ** 30,
  gpuCount: 0,
  gpuTypes: [],
  gpuMilli: 0,
  gpuMemoryBytes: null,
  region: null,
  labels: {},
  allowGpuMachines: false,
};
const machine = (name: string, scheduling: MachineView['scheduling'], heldAttempts?: number): MachineView => ({
  id: name,
  name,
  health: 'ready',
  scheduling,
  region: null,
  labels: {},
  cpuMillisTotal: 4000,
  memoryBytesTotal: 2 ** 33,
  cpuMillisFree: heldAttempts ? 3000 : 4000,
  memoryBytesFree: 2 ** 33,
  gpus: [],
  ...(heldAttempts !== undefined ? { heldAttempts } : {}),
});

describe('a stage no eligible machine takes: the reason says of each machine what `gantry machines` says', () => {
  it('a draining machine with nothing left on it is "drained"; one still running something is "draining"', () => {
    expect(pendingReasonNow(need, [machine('a', 'draining', 0)])).toBe('no ready machine can run it: 1 drained');
    expect(pendingReasonNow(need, [machine('a', 'draining', 2)])).toBe('no ready machine can run it: 1 draining');
    expect(pendingReasonNow(need, [machine('a', 'draining', 1), machine('b', 'draining', 0), machine('c', 'cordoned', 0)])).toBe(
      'no ready machine can run it: 1 cordoned, 1 draining, 1 drained',
    );
    expect(explainPlacement(need, [machine('a', 'draining', 0), machine('b', 'draining', 0)]).reason).toBe('no ready machine can run it: 2 drained');
  });

  it('a reader that did not count the attempts held there does not claim a machine drained', () => {
    expect(pendingReasonNow(need, [machine('a', 'draining')])).toBe('no ready machine can run it: 1 draining');
  });
});
