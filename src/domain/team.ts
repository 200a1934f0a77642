import { formatCpu, formatMemory } from '../spec/quantity.js';
import { GPU_MILLI_WHOLE } from './resources.js';

/**
 * A team: the owner of jobs, of a quota and of a fair-share weight (docs/scheduling.md, "Teams,
 * quotas and fair share"). A resource absent from the quota is not limited; GPU quotas are per
 * type (lower case), as clusters price them.
 */
export interface TeamQuota {
  cpuMillis?: number;
  memoryBytes?: number;
  /** GPUs of each type, e.g. { h100: 16 } or { t4: 2.5 } (at most 3 decimals: thousandths). A type not named is not limited. */
  gpus?: Record<string, number>;
  /** The bytes its committed outputs may hold together (docs/security.md, "Output limits"); absent: the server's GANTRY_TEAM_OUTPUTS_MAX_BYTES. Not a scheduling quota. */
  outputBytes?: number;
}

export interface Team {
  name: string;
  /** Fair-share weight: a team of weight 2 is served as if its usage were half. */
  weight: number;
  quota: TeamQuota;
  createdAt: number;
}

/** What a team's attempts hold now (every attempt not yet released). */
export interface TeamUsage {
  cpuMillis: number;
  memoryBytes: number;
  /** GPUs held per type as amounts: a quarter share is 0.25 (kept to exact thousandths by addUsage). */
  gpus: Record<string, number>;
}

/**
 * A GPU amount (2, 0.25) in thousandths, the unit GPU quotas and usage are compared and summed in
 * (issue 29): 0.1 + 0.2 in floating point is not 0.3, 100 + 200 thousandths are 300.
 */
export function gpuMilliOfAmount(amount: number): number {
  return Math.round(amount * GPU_MILLI_WHOLE);
}

/** Thousandths shown as GPUs: 250 → "0.25", 2000 → "2". */
export function formatGpuAmount(milli: number): string {
  return String(milli / GPU_MILLI_WHOLE);
}

/** Whether a GPU amount has at most three decimals (a whole number of thousandths): what a quota may say. */
export function isGpuAmount(amount: number): boolean {
  return Number.isFinite(amount) && amount >= 0 && Math.abs(amount * GPU_MILLI_WHOLE - gpuMilliOfAmount(amount)) < 1e-6;
}

/** A request's GPUs in thousandths: count × thousandths of each (absent: whole GPUs). */
const requestGpuMilli = (need: { gpuCount: number; gpuMilli?: number }) => need.gpuCount * (need.gpuMilli ?? GPU_MILLI_WHOLE);

export const emptyTeamUsage = (): TeamUsage => ({ cpuMillis: 0, memoryBytes: 0, gpus: {} });

/** The quota as `gantry team --quota` spells it (cpu=64,memory=256Gi,gpu:h100=16,outputs=2Ti); "none" when nothing is limited. */
export function formatTeamQuota(q: TeamQuota): string {
  const parts: string[] = [];
  if (q.cpuMillis !== undefined) parts.push(`cpu=${formatCpu(q.cpuMillis)}`);
  if (q.memoryBytes !== undefined) parts.push(`memory=${formatMemory(q.memoryBytes)}`);
  for (const [t, n] of Object.entries(q.gpus ?? {}).sort(([a], [b]) => (a < b ? -1 : 1))) parts.push(`gpu:${t}=${n}`);
  if (q.outputBytes !== undefined) parts.push(`outputs=${formatMemory(q.outputBytes)}`);
  return parts.length ? parts.join(',') : 'none';
}

/**
 * Why the quota stops a request: the quota line, and whether the request alone is more than the
 * team's whole quota of a resource (`never`: no amount of waiting places it; only a larger quota,
 * or making the stage preemptible so it may borrow, does: Slurm's QOSMaxGRESPerJob, Kueue's
 * inadmissible workload).
 */
export interface QuotaBlock {
  message: string;
  never: boolean;
}

/**
 * Where a request would take the team past its quota, in words ("team vision at quota: uses 15
 * of 16 h100 GPUs, the stage needs 2"; "team vision's quota is 2 h100 GPUs, the stage needs 4:
 * …never…"), or null when it stays within. `gpuType` is the type the stage would get (null: a
 * CPU stage).
 */
export function quotaExceeded(
  team: string,
  quota: TeamQuota,
  usage: TeamUsage,
  need: { cpuMillis: number; memoryBytes: number; gpuCount: number; gpuMilli?: number },
  gpuType: string | null,
): QuotaBlock | null {
  const never = quotaNeverFits(team, quota, need, gpuType);
  if (never) return { message: never, never: true };
  const busy = (used: string, limit: string, what: string, needs: string): QuotaBlock => ({
    message: `team ${team} at quota: uses ${used} of ${limit} ${what}, the stage needs ${needs}`,
    never: false,
  });
  if (quota.cpuMillis !== undefined && usage.cpuMillis + need.cpuMillis > quota.cpuMillis) {
    return busy(formatCpu(usage.cpuMillis), formatCpu(quota.cpuMillis), 'CPU', formatCpu(need.cpuMillis));
  }
  if (quota.memoryBytes !== undefined && usage.memoryBytes + need.memoryBytes > quota.memoryBytes) {
    return busy(formatMemory(usage.memoryBytes), formatMemory(quota.memoryBytes), 'memory', formatMemory(need.memoryBytes));
  }
  if (gpuType !== null && need.gpuCount > 0) {
    const limit = quota.gpus?.[gpuType];
    const used = gpuMilliOfAmount(usage.gpus[gpuType] ?? 0);
    const wants = requestGpuMilli(need);
    if (limit !== undefined && used + wants > gpuMilliOfAmount(limit))
      return busy(formatGpuAmount(used), formatGpuAmount(gpuMilliOfAmount(limit)), `${gpuType} GPUs`, formatGpuAmount(wants));
  }
  return null;
}

/**
 * Where a request alone is more than the team's whole quota of a resource, in words naming the
 * resource, the quota and the request, or null. Usage does not matter: the team could hold
 * nothing and the request would still not fit.
 */
export function quotaNeverFits(
  team: string,
  quota: TeamQuota,
  need: { cpuMillis: number; memoryBytes: number; gpuCount: number; gpuMilli?: number },
  gpuType: string | null,
): string | null {
  const never = (limit: string, what: string, needs: string) =>
    `team ${team}'s quota is ${limit} ${what}, the stage needs ${needs}: it can never run within the quota (raise the quota, or make the stage preemptible so it may borrow)`;
  if (quota.cpuMillis !== undefined && need.cpuMillis > quota.cpuMillis) return never(formatCpu(quota.cpuMillis), 'CPU', formatCpu(need.cpuMillis));
  if (quota.memoryBytes !== undefined && need.memoryBytes > quota.memoryBytes)
    return never(formatMemory(quota.memoryBytes), 'memory', formatMemory(need.memoryBytes));
  if (gpuType !== null && need.gpuCount > 0) {
    const limit = quota.gpus?.[gpuType];
    const wants = requestGpuMilli(need);
    if (limit !== undefined && wants > gpuMilliOfAmount(limit))
      return never(formatGpuAmount(gpuMilliOfAmount(limit)), `${gpuType} GPUs`, formatGpuAmount(wants));
  }
  return null;
}

/**
 * Adds (sign 1) or removes (sign -1) one allocation from a usage, in place. GPUs are summed in
 * thousandths (`gpuMilli` of each of `gpuCount` GPUs; absent: whole), so four quarter shares are 1.
 */
export function addUsage(
  u: TeamUsage,
  a: { cpuMillis: number; memoryBytes: number; gpuCount: number; gpuMilli?: number; gpuType: string | null },
  sign: 1 | -1 = 1,
): void {
  u.cpuMillis += sign * a.cpuMillis;
  u.memoryBytes += sign * a.memoryBytes;
  if (a.gpuType !== null && a.gpuCount > 0) u.gpus[a.gpuType] = amountOfMilli(gpuMilliOfAmount(u.gpus[a.gpuType] ?? 0) + sign * requestGpuMilli(a));
}

/** Thousandths back to an amount: the nearest double to n/1000, so sums stay exact in thousandths. */
const amountOfMilli = (milli: number) => milli / GPU_MILLI_WHOLE;

/** Whether the usage is beyond the quota in any resource: the team is borrowing. */
export function isBorrowing(quota: TeamQuota, u: TeamUsage): boolean {
  if (quota.cpuMillis !== undefined && u.cpuMillis > quota.cpuMillis) return true;
  if (quota.memoryBytes !== undefined && u.memoryBytes > quota.memoryBytes) return true;
  return Object.entries(quota.gpus ?? {}).some(([t, n]) => gpuMilliOfAmount(u.gpus[t] ?? 0) > gpuMilliOfAmount(n));
}

/**
 * Dominant share (DRF, as in Kueue's fair sharing and YARN): the largest fraction of the cluster's
 * CPU, memory or GPUs of one type the team holds, divided by its weight. Lower goes first.
 */
export function dominantShare(u: TeamUsage, weight: number, total: TeamUsage): number {
  let share = 0;
  if (total.cpuMillis > 0) share = Math.max(share, u.cpuMillis / total.cpuMillis);
  if (total.memoryBytes > 0) share = Math.max(share, u.memoryBytes / total.memoryBytes);
  for (const [t, n] of Object.entries(u.gpus)) if ((total.gpus[t] ?? 0) > 0) share = Math.max(share, n / total.gpus[t]!);
  return share / (weight > 0 ? weight : 1);
}
