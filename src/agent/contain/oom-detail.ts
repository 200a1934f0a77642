/**
 * What a person reads when an attempt ends `oom-killed` (docs/containment.md, "Out of memory"): the
 * limit it reached, which field of the stage set it, its peak, and what to raise. The decision is
 * the kind (`oom-killed`, from the cgroup's OOM count); this is only the detail.
 */
import type { AttemptLimitsWire } from '../../api/contract/containment.js';

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;

/** `limits`: the assignment's (null from a server before containment: no limit was set). */
export function oomDetail(limits: AttemptLimitsWire | null, usage: { memoryPeakBytes: number | null; memoryLimitBytes: number | null }): string {
  const peak = usage.memoryPeakBytes === null ? '' : ` (peak ${bytes(usage.memoryPeakBytes, true)})`;
  if (!limits || usage.memoryLimitBytes === null) {
    return `out of memory: the kernel killed a process of the attempt when the machine ran out of memory${peak}; its stage sets no memory limit here`;
  }
  const limit = bytes(usage.memoryLimitBytes, false);
  if (limits.memoryBytes !== null) {
    return `out of memory: the attempt reached its memory limit of ${limit} (limits.memory) and the kernel killed it${peak}; raise limits.memory`;
  }
  return `out of memory: the attempt reached its memory limit of ${limit} (resources.memory) and the kernel killed it${peak}; raise resources.memory, or set limits.memory above it`;
}

/** `64 MiB`, `1.5 GiB`; `fixed`: always one decimal (a measure, `64.0 MiB`), else only where the number is not whole (a setting). */
function bytes(n: number, fixed: boolean): string {
  const [unit, name] = n >= GiB ? [GiB, 'GiB'] : [MiB, 'MiB'];
  const v = n / unit;
  return `${fixed || !Number.isInteger(v) ? v.toFixed(1) : String(v)} ${name}`;
}
