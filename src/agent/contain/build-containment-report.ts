/**
 * What the agent says it enforces when it registers (ContainmentReport, contract/containment.ts):
 * its cgroups' enforcement, and who its stages run as and under which sandbox, which the parts of
 * containment that decide those give it (docs/containment.md, "What `gantry machines` shows").
 */
import type { ContainmentReport, GpuSharingMode } from '../../api/contract/containment.js';
import type { MigIsolation } from '../machine/mig-capabilities.js';
import type { CgroupEnforcement } from './cgroup-tree.js';
import { cgroupJoinWaitHint, type CgroupJoinWait } from './cgroup-join-wait.js';

/** Whether MIG devices are kept apart, and if not why (migIsolationReport); isolated null: the machine has none. */
export interface MigIsolationReport {
  isolated: boolean | null;
  problem: string | null;
}

/** The contract's bounds: a server refuses a registration past them. */
const MAX_PROBLEMS = 20;
const MAX_PROBLEM = 500;
const MAX_USER = 200;

export function buildContainmentReport(
  e: CgroupEnforcement,
  who: {
    user: string;
    sandbox: 'bwrap' | null;
    problems?: readonly string[];
    gpuSharing?: GpuSharingMode;
    mig?: MigIsolationReport;
    /** Null or absent: attempts join no cgroup (nothing to say). */
    joinWait?: CgroupJoinWait | null;
  },
): ContainmentReport {
  const mig = who.mig ?? { isolated: null, problem: null };
  const joinWait = who.joinWait && who.joinWait.kind !== 'no-cgroups' ? who.joinWait : null;
  const joinHint = joinWait ? cgroupJoinWaitHint(joinWait) : null;
  return {
    mechanism: e.mechanism,
    memory: e.memory !== null,
    cpu: e.cpu !== null,
    pids: e.pids !== null,
    devices: e.devices,
    kill: e.kill,
    user: clip(who.user, MAX_USER),
    sandbox: who.sandbox,
    problems: [...e.problems, ...(who.problems ?? []), ...(mig.problem ? [mig.problem] : []), ...(joinHint ? [joinHint] : [])]
      .slice(0, MAX_PROBLEMS)
      .map((p) => clip(p, MAX_PROBLEM)),
    ...(who.gpuSharing ? { gpuSharing: who.gpuSharing } : {}),
    ...(mig.isolated !== null ? { migIsolated: mig.isolated } : {}),
    ...(joinWait ? { favordynmods: joinWait.kind === 'favoured' } : {}),
  };
}

/**
 * Whether MIG devices are kept apart (docs/machines.md, "What isolates MIG devices from each
 * other"): only where their capability minors are all known and something restricts the files an
 * attempt opens, the v1 devices cgroup or the sandbox. Null isolated: no MIG devices.
 */
export function migIsolationReport(mig: MigIsolation, devices: boolean, sandbox: boolean): MigIsolationReport {
  if (mig === null) return { isolated: null, problem: null };
  if (!mig.isolated)
    return {
      isolated: false,
      problem: `MIG devices of one GPU are not isolated from each other: ${mig.why}; an attempt on such a device may open every capability file`,
    };
  if (!devices && !sandbox)
    return {
      isolated: false,
      problem: 'MIG devices of one GPU are not isolated from each other: neither the v1 devices cgroup nor the sandbox restricts /dev/nvidia-caps',
    };
  return { isolated: true, problem: null };
}

function clip(text: string, max: number): string {
  return text.length <= max ? text : text.slice(0, max - 1) + '…';
}
