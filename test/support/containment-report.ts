import type { ContainmentReport } from '../../src/api/contract/containment.js';

/**
 * What an agent on this project's CI host reports (docs/containment.md): limits from cgroup v1,
 * kill and emptiness from v2, a uid of its own per attempt, devices not enforced and saying why.
 * Tests spread it and change what they test.
 */
export const hybridReport: ContainmentReport = {
  mechanism: 'cgroup-hybrid',
  memory: true,
  cpu: true,
  pids: true,
  devices: false,
  kill: 'cgroup.kill',
  user: 'dynamic 61184-65519',
  sandbox: null,
  problems: ['devices: the v1 devices controller is not mounted; GPUs are not fenced'],
};
