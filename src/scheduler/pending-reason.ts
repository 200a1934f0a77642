import { machineHealths, type MachineHealth } from '../domain/machine-health.js';
import { machineSchedulings, shownScheduling, type MachineScheduling } from '../domain/machine-scheduling.js';
import { formatGpuAmount } from '../domain/team.js';
import { formatCpu, formatMemory } from '../spec/quantity.js';
import { firstReject, isBusyReason, RejectReason, type StageNeed } from './checks.js';
import type { GangNeed } from './gang-placer.js';
import type { MachineView } from './snapshot.js';

/** Why one machine was rejected for a stage (the input to the one-line reason). */
export interface MachineReject {
  health: MachineHealth;
  scheduling: MachineScheduling;
  reason: RejectReason;
  /** Attempts holding resources there (MachineView.heldAttempts); unknown: taken as some. */
  heldAttempts?: number;
}

/** A machine's reject as the reasons read it. */
export function machineReject(m: MachineView, reason: RejectReason): MachineReject {
  return { health: m.health, scheduling: m.scheduling, reason, ...(m.heldAttempts !== undefined ? { heldAttempts: m.heldAttempts } : {}) };
}

/** For the reasons that are the machine's state, not the stage's fit: that state (its phrase, and
 *  its rank among equal counts). */
function machineState(r: MachineReject): { phrase: string; rank: number } | null {
  if (r.reason === RejectReason.notReady) return { phrase: r.health, rank: machineHealths.indexOf(r.health) };
  if (r.reason === RejectReason.notEligible) {
    // The words `gantry machines` uses: a draining machine with nothing left on it is "drained".
    const shown = shownScheduling(r.scheduling, r.heldAttempts ?? 1);
    return { phrase: shown, rank: machineSchedulings.indexOf(r.scheduling) + (shown === r.scheduling ? 0 : 0.5) };
  }
  return null;
}

/** "2 h100 GPUs", "1 GPU", "4 a100 or h100 GPUs"; `free` inserts "free" after the count. */
export function describeGpus(count: number, types: readonly string[], free = false): string {
  const parts = [String(count)];
  if (free) parts.push('free');
  if (types.length > 0) parts.push(types.join(' or '));
  parts.push(count === 1 ? 'GPU' : 'GPUs');
  return parts.join(' ');
}

/**
 * The stage's GPUs in words: whole ones as `describeGpus`; a share as "0.25 of an h100 GPU"
 * ("… and 10 GiB of its memory" with a memory bound). `free`: "an h100 GPU with 0.25 free".
 */
export function describeNeedGpus(need: StageNeed, free = false): string {
  if (need.gpuMilli >= 1000 || need.gpuMilli <= 0) {
    const whole = describeGpus(need.gpuCount, need.gpuTypes, free);
    return need.gpuMemoryBytes === null ? whole : `${whole} of ${formatMemory(need.gpuMemoryBytes)} memory or more`;
  }
  const amount = formatGpuAmount(need.gpuMilli);
  const gpu = need.gpuTypes.length > 0 ? `${need.gpuTypes.join(' or ')} GPU` : 'GPU';
  const memory = need.gpuMemoryBytes === null ? '' : ` and ${formatMemory(need.gpuMemoryBytes)} of its memory`;
  return free ? `${gpu} with ${amount}${memory} free` : `${amount} of ${/^[aeiou]/.test(gpu) ? 'an' : 'a'} ${gpu}${memory}`;
}

function describeCpuMemory(need: StageNeed): string {
  return `${formatCpu(need.cpuMillis)} CPU, ${formatMemory(need.memoryBytes)}`;
}

/** Display order among equal counts: resources first, then placement, then machine health. */
const STATIC_ORDER: readonly RejectReason[] = [
  RejectReason.gpuType,
  RejectReason.gpuTotal,
  RejectReason.gpuMemory,
  RejectReason.cpuTotal,
  RejectReason.memoryTotal,
  RejectReason.gpuMachine,
  RejectReason.region,
  RejectReason.labels,
  RejectReason.notReady,
  RejectReason.notEligible,
];

function staticPhrase(need: StageNeed, r: MachineReject, n: number): string {
  const lack = n === 1 ? 'lacks' : 'lack';
  switch (r.reason) {
    case RejectReason.gpuType:
    case RejectReason.gpuTotal:
      return `${lack} ${describeGpus(need.gpuCount, need.gpuTypes)}`;
    case RejectReason.gpuMemory:
      return `${lack} ${describeGpus(need.gpuCount, need.gpuTypes)} known to have ${formatMemory(need.gpuMemoryBytes ?? 0)} of memory (a GPU whose memory is unknown takes no stage that bounds GPU memory)`;
    case RejectReason.cpuTotal:
      return `too small for ${formatCpu(need.cpuMillis)} CPU`;
    case RejectReason.memoryTotal:
      return `too small for ${formatMemory(need.memoryBytes)} memory`;
    case RejectReason.region:
      return `in another region (wants ${need.region ?? 'any'})`;
    case RejectReason.gpuMachine:
      return `${n === 1 ? 'has GPUs and keeps' : 'have GPUs and keep'} ${n === 1 ? 'its' : 'their'} CPUs for GPU work (placement.allowGpuMachines: true lets a CPU stage in)`;
    case RejectReason.labels: {
      const labels = Object.entries(need.labels)
        .map(([k, v]) => `${k}=${v}`)
        .sort();
      return `${lack} ${labels.length === 1 ? 'label' : 'labels'} ${labels.join(',')}`;
    }
    default:
      return machineState(r)?.phrase ?? r.reason;
  }
}

/**
 * One line a person can act on, from every machine's reject code for a stage that was not placed.
 * If any machine would fit when idle, the stage is waiting for capacity; otherwise it lists why no
 * machine can ever take it, with counts per reason, most common first.
 */
export function pendingReason(need: StageNeed, rejects: readonly MachineReject[]): string {
  if (rejects.length === 0) return 'no machines registered';

  const busy = rejects.filter((r) => isBusyReason(r.reason));
  if (busy.length > 0) {
    const n = busy.length;
    const tail = `${n} of ${n} matching ${n === 1 ? 'machine' : 'machines'} busy`;
    if (busy.every((r) => r.reason === RejectReason.gpuShare)) {
      return `waits for GPU work: ${n === 1 ? 'the GPU machine keeps' : `the ${n} GPU machines keep`} the CPU and memory that go with ${n === 1 ? 'its' : 'their'} free GPUs (needs ${describeCpuMemory(need)}): ${tail}`;
    }
    if (need.gpuCount === 0) return `not enough free CPU/memory (needs ${describeCpuMemory(need)}): ${tail}`;
    const gpuOnly = busy.every((r) => r.reason === RejectReason.gpuBusy);
    if (need.gpuMilli > 0 && need.gpuMilli < 1000) {
      // A share: "no h100 GPU with 0.25 free: …", the room it waits for on one GPU.
      const what = describeNeedGpus(need, true);
      return gpuOnly ? `no ${what}: ${tail}` : `no machine with an ${what} and ${describeCpuMemory(need)} free: ${tail}`;
    }
    const what = describeNeedGpus(need, true) + (gpuOnly ? '' : ` and ${describeCpuMemory(need)} free`);
    return `no machine with ${what}: ${tail}`;
  }

  return `no ready machine can run it: ${staticReasons(need, rejects)}`;
}

/** "5 lack 2 h100 GPUs, 1 suspect": machines that can never take the stage, counted per reason, most common first. */
function staticReasons(need: StageNeed, rejects: readonly MachineReject[]): string {
  // Group by phrase key; gpuType and gpuTotal share one phrase ("lack 2 h100 GPUs").
  const groups = new Map<string, { sample: MachineReject; order: number; count: number }>();
  for (const r of rejects) {
    const reason = r.reason === RejectReason.gpuType ? RejectReason.gpuTotal : r.reason;
    const state = machineState(r);
    const key = state ? `${reason}:${state.phrase}` : reason;
    const order = STATIC_ORDER.indexOf(reason) * 100 + (state?.rank ?? 0);
    const g = groups.get(key) ?? { sample: r, order, count: 0 };
    g.count += 1;
    groups.set(key, g);
  }
  return [...groups.values()]
    .sort((a, b) => b.count - a.count || a.order - b.order)
    .map((g) => `${g.count} ${staticPhrase(need, g.sample, g.count)}`)
    .join(', ');
}

/**
 * Why a ready stage is not running, asked now of the cluster as it is: null when some machine
 * has room for it (the next pass places it), else the one-line reason. Computed when someone
 * looks (status, explain), not written by every pass: a pass costs what it places.
 */
export function pendingReasonNow(need: StageNeed, machines: readonly MachineView[]): string | null {
  const rejects: MachineReject[] = [];
  for (const m of machines) {
    const reason = firstReject(need, m);
    if (reason === null) return null;
    rejects.push(machineReject(m, reason));
  }
  return pendingReason(need, rejects);
}

/**
 * What a gang that waits lacks, per group of machines (docs/gangs.md): without sameLabel one group
 * of every machine (value ''); with it, one per value of the label, machines without it apart.
 */
export interface GangShortfall {
  size: number;
  sameLabel: string | null;
  /** Per group: machines that could take a member now, and were they idle (the best of its GPU types). */
  groups: { value: string; now: number; idle: number }[];
  /** Machines that can never take a member (health, scheduling, region, labels, too small). */
  rejects: MachineReject[];
  /** Machines that could take a member but have no value of the sameLabel key. */
  lackingLabel: number;
  /** Every busy machine waits for GPUs only (not CPU or memory). */
  gpuOnly: boolean;
  machines: number;
}

/** "rack" → "racks", "2 racks"; a key that is not one plain word is named as its groups ("2 topology.io/zone groups"). */
function groupWord(key: string, n: number): string {
  if (!/^[a-z][a-z-]*$/i.test(key)) return n === 1 ? `${key} group` : `${key} groups`;
  return n === 1 ? key : /(s|x|sh|ch)$/.test(key) ? `${key}es` : `${key}s`;
}

/** "2 racks have 3, 1 rack has 1" for per-group counts (groups with none left out), or "no rack has one". */
function groupCounts(key: string, counts: readonly number[]): string {
  const byCount = new Map<number, number>();
  for (const c of counts) if (c > 0) byCount.set(c, (byCount.get(c) ?? 0) + 1);
  if (byCount.size === 0) return `no ${groupWord(key, 1)} has one`;
  return [...byCount]
    .sort(([a], [b]) => b - a)
    .map(([count, groups]) => `${groups} ${groupWord(key, groups)} ${groups === 1 ? 'has' : 'have'} ${count}`)
    .join(', ');
}

/**
 * One line for a gang that waits, naming what it lacks (issue 31): "needs 4 machines with 8 free
 * h100 GPUs in one rack: 2 racks have 3"; when no set of machines could take it even idle, "needs
 * 4 machines with 8 h100 GPUs in one rack: even idle, 1 rack has 3; 5 lack 8 h100 GPUs".
 */
export function gangPendingReason(gang: GangNeed, s: GangShortfall): string {
  if (s.machines === 0) return 'no machines registered';
  const need = gang.member;
  const inOne = s.sameLabel === null ? '' : ` in one ${s.sameLabel}`;
  const idleSets = s.groups.some((g) => g.idle >= s.size);
  if (idleSets) {
    const what =
      need.gpuCount === 0 ? `${describeCpuMemory(need)} free` : describeNeedGpus(need, true) + (s.gpuOnly ? '' : ` and ${describeCpuMemory(need)} free`);
    const now = s.groups.map((g) => g.now);
    const n = Math.max(0, ...now);
    const counts = s.sameLabel !== null ? groupCounts(s.sameLabel, now) : n === 0 ? 'none has them' : `${n} ${n === 1 ? 'has' : 'have'} them`;
    return `needs ${s.size} machines with ${what}${inOne}: ${counts}`;
  }
  // Machines too small in CPU or memory are named among the reasons below; the head names the GPUs.
  const what = need.gpuCount === 0 ? describeCpuMemory(need) : describeNeedGpus(need);
  const idle = s.groups.map((g) => g.idle);
  const n = Math.max(0, ...idle);
  const counts = s.sameLabel !== null ? `even idle, ${groupCounts(s.sameLabel, idle)}` : `${n === 0 ? 'none' : `only ${n}`} could run a member even idle`;
  const rest = [s.rejects.length ? staticReasons(need, s.rejects) : '', s.lackingLabel ? `${s.lackingLabel} without a ${s.sameLabel} label` : '']
    .filter((x) => x !== '')
    .join(', ');
  return `needs ${s.size} machines with ${what}${inOne}: ${counts}${rest ? `; ${rest}` : ''}`;
}
