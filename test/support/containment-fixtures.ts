/**
 * What the containment tests share: an assignment's limits as a server of protocol 3 sends them,
 * and whether a process is gone.
 */
import { readFileSync } from 'node:fs';
import type { AttemptLimitsWire } from '../../src/api/contract/containment.js';

export const MiB = 1024 * 1024;

/** One CPU and 64 MiB requested, nothing above; `over` changes what a test is about. */
export function attemptLimits(over: Partial<AttemptLimitsWire> = {}): AttemptLimitsWire {
  return { requestCpuMillis: 1000, requestMemoryBytes: 64 * MiB, memoryBytes: null, cpuMillis: null, pids: null, network: false, ...over };
}

/**
 * No such process, or a zombie. This machine's init does not reap orphans, so the orphans of a
 * killed attempt stay zombies: they run nothing, hold no memory, and have left their cgroups.
 */
export function processGone(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return true;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] === 'Z';
  } catch {
    return true;
  }
}
