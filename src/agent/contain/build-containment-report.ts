/**
 * What the agent says it enforces when it registers (ContainmentReport, contract/containment.ts):
 * its cgroups' enforcement, and who its stages run as and under which sandbox, which the parts of
 * containment that decide those give it (docs/containment.md, "What `gantry machines` shows").
 */
import type { ContainmentReport, GpuSharingMode } from '../../api/contract/containment.js';
import type { CgroupEnforcement } from './cgroup-tree.js';

/** The contract's bounds: a server refuses a registration past them. */
const MAX_PROBLEMS = 20;
const MAX_PROBLEM = 500;
const MAX_USER = 200;

export function buildContainmentReport(
  e: CgroupEnforcement,
  who: { user: string; sandbox: 'bwrap' | null; problems?: readonly string[]; gpuSharing?: GpuSharingMode },
): ContainmentReport {
  return {
    mechanism: e.mechanism,
    memory: e.memory !== null,
    cpu: e.cpu !== null,
    pids: e.pids !== null,
    devices: e.devices,
    kill: e.kill,
    user: clip(who.user, MAX_USER),
    sandbox: who.sandbox,
    problems: [...e.problems, ...(who.problems ?? [])].slice(0, MAX_PROBLEMS).map((p) => clip(p, MAX_PROBLEM)),
    ...(who.gpuSharing ? { gpuSharing: who.gpuSharing } : {}),
  };
}

function clip(text: string, max: number): string {
  return text.length <= max ? text : text.slice(0, max - 1) + '…';
}
