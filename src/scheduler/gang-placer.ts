import { gangSizeOf, GPU_MILLI_WHOLE, normalizeGpuType } from '../domain/resources.js';
import { acceptsGpuType, firstReject, gpuCountsByType, gpuRoomFor, isBusyReason, RejectReason, stageNeed, type StageNeed } from './checks.js';
import { gangPendingReason, machineReject, type GangShortfall, type MachineReject } from './pending-reason.js';
import { compareCandidates, compareMachines } from './rank.js';
import type { MachineView, QueuedStage } from './snapshot.js';

/**
 * A gang stage's request (issue 31, docs/gangs.md): `size` members, each on its own machine with
 * `member` (an ordinary stage's need, checked by the same rules), all of one GPU type, and with
 * `sameLabel` all on machines with one value of that label.
 */
export interface GangNeed {
  member: StageNeed;
  size: number;
  sameLabel: string | null;
}

/** The stage's gang, or null for an ordinary stage (one machine). */
export function gangNeedOf(stage: Pick<QueuedStage, 'resources' | 'placement'>): GangNeed | null {
  const size = gangSizeOf(stage.resources);
  if (size < 2) return null;
  return { member: stageNeed(stage), size, sameLabel: stage.placement.sameLabel ?? null };
}

/** The whole gang as one request, for its team's quota: a gang is charged all its members at once. */
export function gangTotal(gang: GangNeed): StageNeed {
  const m = gang.member;
  return { ...m, cpuMillis: m.cpuMillis * gang.size, memoryBytes: m.memoryBytes * gang.size, gpuCount: m.gpuCount * gang.size };
}

/** One member's place: its machine and the devices it takes there (ascending; empty for CPU members). */
export interface GangMemberChoice {
  machine: MachineView;
  gpuIndices: number[];
}

export type GangOutcome =
  /** Every member's place, rank 0 first (ranks follow machine names). */
  | { members: GangMemberChoice[] }
  | {
      members: null;
      reason: string;
      /** No set of machines could take it even were every machine idle. */
      unplaceable: boolean;
      /** The machines to hold for it (`size` of them), or empty: it waits without holding. */
      hold: MachineView[];
    };

export interface GangPlaceOptions {
  /** May not take a member now: held for an earlier stage, and this gang does not backfill it. */
  barred: (m: MachineView) => boolean;
  /** May not be part of this gang's hold: held for an earlier stage, or taken by a gang this pass. */
  unavailable: (m: MachineView) => boolean;
}

/** Machines of one sameLabel value (or all, without sameLabel), for one GPU type (null: a CPU gang). */
export interface GangGroup {
  type: string | null;
  value: string;
  need: StageNeed;
  /** Could take a member now. */
  now: MachineView[];
  /** Could take one were it idle (now included). */
  idle: MachineView[];
}

/** The GPU types the gang could use (all its members on one), or [null] for a CPU gang. */
function typesFor(member: StageNeed, machines: readonly MachineView[]): (string | null)[] {
  if (member.gpuCount === 0) return [null];
  const types = new Set<string>();
  for (const m of machines) for (const g of m.gpus) if (acceptsGpuType(member, g.type)) types.add(normalizeGpuType(g.type));
  return [...types].sort();
}

/** A machine's value of a gang's `sameLabel` (every machine is in the one group '' without it), or undefined: it has no such label. */
export const labelOf = (m: MachineView, key: string | null): string | undefined =>
  key === null ? '' : Object.hasOwn(m.labels, key) ? m.labels[key] : undefined;

/**
 * The groups a gang may take its machines from: per GPU type it accepts (sorted) and per value of
 * its sameLabel (sorted), the machines where a member would fit were they idle (`idle`), and of
 * those, the ones not `barred` where it fits now (`now`). Shared by placement and preemption.
 */
export function groupsOf(gang: GangNeed, machines: readonly MachineView[], barred: (m: MachineView) => boolean): GangGroup[] {
  const out: GangGroup[] = [];
  for (const type of typesFor(gang.member, machines)) {
    const need = type === null ? gang.member : { ...gang.member, gpuTypes: [type] };
    const byValue = new Map<string, GangGroup>();
    for (const m of machines) {
      const value = labelOf(m, gang.sameLabel);
      if (value === undefined) continue;
      const r = firstReject(need, m);
      if (r !== null && !isBusyReason(r)) continue;
      let g = byValue.get(value);
      if (g === undefined) byValue.set(value, (g = { type, value, need, now: [], idle: [] }));
      g.idle.push(m);
      if (r === null && !barred(m)) g.now.push(m);
    }
    out.push(...[...byValue.values()].sort((a, b) => (a.value < b.value ? -1 : a.value > b.value ? 1 : 0)));
  }
  return out;
}

/** Free GPUs of the group's type on the machine, for its need (0 for a CPU gang). */
function freeGpus(g: GangGroup, m: MachineView): number {
  return g.type === null ? 0 : (gpuCountsByType(g.need, m).get(g.type)?.free ?? 0);
}

/** The member's devices on a machine that fits it now: the lowest-numbered free GPUs of the group's type. */
function devicesOn(g: GangGroup, m: MachineView): number[] {
  if (g.type === null) return [];
  return m.gpus
    .filter((x) => normalizeGpuType(x.type) === g.type && gpuRoomFor(g.need, x) > 0)
    .map((x) => x.index)
    .sort((a, b) => a - b)
    .slice(0, g.need.gpuCount);
}

/**
 * Where the gang's members go now, all of them or none. In each group (a sameLabel value and a
 * GPU type) with `size` machines that fit a member now, the best fit's machines (rank.ts: fewest
 * free GPUs left, then least CPU left, then name), one member each; of those sets, the one that
 * leaves fewest GPUs free. The share policy (FGD) does not rank gangs yet: best fit is a first
 * version (docs/gangs.md). A gang that does not fit is held `size` machines where it would fit
 * when idle, none of them held for an earlier stage or taken by a gang this pass, so that two
 * gangs never each hold part of what the other needs; the set with most machines fitting now,
 * then most free GPUs. Pure; the machines are the pass's working copies and are not changed.
 */
export function chooseGang(gang: GangNeed, machines: readonly MachineView[], opts: GangPlaceOptions): GangOutcome {
  // The spec refuses it (job-spec.ts); a definition that got past it anyway waits, said so, rather
  // than giving members shares that the placement's members do not record.
  if (gang.member.gpuCount > 0 && gang.member.gpuMilli < GPU_MILLI_WHOLE) {
    return { members: null, reason: "a gang's members take whole GPUs, not a share of one", unplaceable: true, hold: [] };
  }
  const groups = groupsOf(gang, machines, opts.barred);

  let best: { g: GangGroup; set: MachineView[]; left: number; cpuLeft: number } | null = null;
  for (const g of groups) {
    if (g.now.length < gang.size) continue;
    const set = [...g.now].sort((a, b) => compareCandidates(g.need, { machine: a, gpuType: g.type }, { machine: b, gpuType: g.type })).slice(0, gang.size);
    const left = set.reduce((n, m) => n + freeGpus(g, m) - g.need.gpuCount, 0);
    const cpuLeft = set.reduce((n, m) => n + (m.cpuMillisFree - g.need.cpuMillis) / Math.max(1, m.cpuMillisTotal), 0);
    if (best === null || left < best.left || (left === best.left && cpuLeft < best.cpuLeft)) best = { g, set, left, cpuLeft };
  }
  if (best !== null) {
    const g = best.g;
    return { members: [...best.set].sort(compareMachines).map((machine) => ({ machine, gpuIndices: devicesOn(g, machine) })) };
  }

  const shortfall = shortfallOf(gang, machines, groups, opts.barred);
  const unplaceable = !groups.some((g) => g.idle.length >= gang.size);
  return { members: null, reason: gangPendingReason(gang, shortfall), unplaceable, hold: unplaceable ? [] : holdFor(gang, groups, opts.unavailable) };
}

/** The `size` machines to hold, or none when no group has that many free of other holds. */
function holdFor(gang: GangNeed, groups: readonly GangGroup[], unavailable: (m: MachineView) => boolean): MachineView[] {
  let best: { set: MachineView[]; fitNow: number; free: number } | null = null;
  for (const g of groups) {
    const open = g.idle.filter((m) => !unavailable(m));
    if (open.length < gang.size) continue;
    const nowSet = new Set(g.now);
    // Nearest to fitting first: fits now, then most free GPUs of the type ("frees first" read as
    // "has least left to free", as for one large stage: run times are unknown), then by name.
    const set = open
      .sort((a, b) => Number(nowSet.has(b)) - Number(nowSet.has(a)) || freeGpus(g, b) - freeGpus(g, a) || compareMachines(a, b))
      .slice(0, gang.size);
    const fitNow = set.filter((m) => nowSet.has(m)).length;
    const free = set.reduce((n, m) => n + freeGpus(g, m), 0);
    if (best === null || fitNow > best.fitNow || (fitNow === best.fitNow && free > best.free)) best = { set, fitNow, free };
  }
  return best?.set ?? [];
}

/** What the words of a gang that waits are made of: per group, how many machines could take a member. */
function shortfallOf(gang: GangNeed, machines: readonly MachineView[], groups: readonly GangGroup[], barred: (m: MachineView) => boolean): GangShortfall {
  // Per sameLabel value, the best of its GPU types (all members take one type).
  const byValue = new Map<string, { value: string; now: number; idle: number }>();
  for (const g of groups) {
    const v = byValue.get(g.value) ?? { value: g.value, now: 0, idle: 0 };
    v.now = Math.max(v.now, g.now.length);
    v.idle = Math.max(v.idle, g.idle.length);
    byValue.set(g.value, v);
  }
  const rejects: MachineReject[] = [];
  const busy = new Set<RejectReason>();
  let lackingLabel = 0;
  for (const m of machines) {
    const r = firstReject(gang.member, m);
    if (r !== null && !isBusyReason(r)) rejects.push(machineReject(m, r));
    else if (labelOf(m, gang.sameLabel) === undefined) lackingLabel += 1;
    else if (r !== null) busy.add(r);
    else if (barred(m)) busy.add(gang.member.gpuCount > 0 ? RejectReason.gpuBusy : RejectReason.cpuBusy);
  }
  return {
    size: gang.size,
    sameLabel: gang.sameLabel,
    groups: [...byValue.values()],
    rejects,
    lackingLabel,
    gpuOnly: gang.member.gpuCount > 0 && [...busy].every((r) => r === RejectReason.gpuBusy),
    machines: machines.length,
  };
}

/**
 * Why a gang waits, asked now of the cluster as it is (status, explain): null when its members
 * fit now, else the line. As `pendingReasonNow` for one stage; no holds are known here.
 */
export function gangPendingReasonNow(gang: GangNeed, machines: readonly MachineView[]): string | null {
  const out = chooseGang(gang, machines, { barred: () => false, unavailable: () => false });
  return out.members === null ? out.reason : null;
}
