/**
 * What an attempt's cgroups say of its end, read once they are empty (docs/containment.md, "Out of
 * memory"): what it used, and whether the kernel's OOM killer ended it. A moved OOM count makes the
 * end `oom-killed` whatever the exit status (a shell whose child was killed may exit 1; Slurm's
 * OUT_OF_MEMORY is decided the same way); an end the agent caused (a timeout, a kill) stays what
 * it was, the agent's reason being the one that counts.
 */
import type { AttemptLimitsWire, AttemptUsageWire } from '../../api/contract/containment.js';
import type { ExitKind } from '../disk/attempt-journal.js';
import type { AttemptCgroup } from './attempt-cgroup.js';
import { oomDetail } from './oom-detail.js';

export interface CgroupEnd<E> {
  end: E;
  usage: AttemptUsageWire;
}

/** `limits`: the assignment's (null from a server before containment), named by the detail of an OOM. */
export function cgroupEnd<E extends { kind?: ExitKind; reason: string | null }>(cg: AttemptCgroup, result: E, limits: AttemptLimitsWire | null): CgroupEnd<E> {
  const u = cg.usage();
  const usage: AttemptUsageWire = {
    memoryPeakBytes: u.memoryPeakBytes,
    // Milliseconds are plenty, and keep the number short on the wire.
    cpuSeconds: u.cpuSeconds === null ? null : Math.round(u.cpuSeconds * 1000) / 1000,
  };
  const oom = u.oomKills > 0 && (result.kind === 'exited' || result.kind === 'signaled');
  return { usage, end: oom ? { ...result, kind: 'oom-killed', reason: oomDetail(limits, u) } : result };
}
