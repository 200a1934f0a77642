import { firstReject, isBusyReason, RejectReason, stageNeed, type StageNeed } from './checks.js';
import { chooseGang, gangNeedOf, type GangNeed } from './gang-placer.js';
import type { MachineView, QueuedStage } from './snapshot.js';

/**
 * A gang (docs/gangs.md) that no set of machines could take even were they idle, although some
 * machine could run a member: too few such machines, or not that many with one value of its
 * `sameLabel`. No reject code of one machine says that: each machine would take its member.
 */
export const GANG_MACHINES = 'gang-machines';

/** Every code waitReasonKind may answer: a metric's series exist for each, at 0 when none waits so. */
export const WAIT_REASON_KINDS: readonly string[] = ['placeable', ...Object.values(RejectReason), GANG_MACHINES, 'no-machines'];

/**
 * Why the stages of a shape wait, as one code (a metric's label, the pools page's group): the
 * same rule as the sentence `stageReasonNow` gives them, so that the two never disagree.
 *
 * One stage: `placeable` when some machine has room now (the next pass places it), else the reject
 * code most machines give, busy codes first (they say "capacity", the static ones "no machine
 * ever"), or `no-machines`.
 *
 * A gang: `placeable` only when its whole set fits now (the gang placer's rule: `size` distinct
 * machines, one `sameLabel` value when set); one free machine does not make a gang of 4 runnable.
 * Else a busy code when enough machines could take it were they idle (it waits for room); else
 * the static code most machines give when none could run even a member; else `gang-machines`.
 */
export function waitReasonKind(stage: Pick<QueuedStage, 'resources' | 'placement'>, machines: readonly MachineView[]): string {
  if (machines.length === 0) return 'no-machines';
  const gang = gangNeedOf(stage);
  return gang ? gangKind(gang, machines) : stageKind(stageNeed(stage), machines);
}

function stageKind(need: StageNeed, machines: readonly MachineView[]): string {
  const counts = new Map<RejectReason, number>();
  let busy = false;
  for (const m of machines) {
    const r = firstReject(need, m);
    if (r === null) return 'placeable';
    if (isBusyReason(r)) busy = true;
    counts.set(r, (counts.get(r) ?? 0) + 1);
  }
  return mostCommon(counts, busy ? isBusyReason : () => true)!;
}

function gangKind(gang: GangNeed, machines: readonly MachineView[]): string {
  // No holds are known here (as gangPendingReasonNow): the cluster as it is.
  const out = chooseGang(gang, machines, { barred: () => false, unavailable: () => false });
  if (out.members !== null) return 'placeable';
  const counts = new Map<RejectReason, number>();
  let members = 0;
  for (const m of machines) {
    const r = firstReject(gang.member, m);
    if (r === null || isBusyReason(r)) members += 1;
    if (r !== null) counts.set(r, (counts.get(r) ?? 0) + 1);
  }
  if (!out.unplaceable) {
    // Some set would fit when idle, so some of its machines are busy for a member; a member that
    // fits one machine only by a GPU type the set does not share counts as busy GPUs.
    return mostCommon(counts, isBusyReason) ?? (gang.member.gpuCount > 0 ? RejectReason.gpuBusy : RejectReason.cpuBusy);
  }
  if (members === 0) return mostCommon(counts, (r) => !isBusyReason(r)) ?? GANG_MACHINES;
  return GANG_MACHINES;
}

/** The code most machines give among those `keep` allows (ties by name), or null when none. */
function mostCommon(counts: ReadonlyMap<RejectReason, number>, keep: (r: RejectReason) => boolean): string | null {
  const pick = [...counts].filter(([r]) => keep(r)).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  return pick[0]?.[0] ?? null;
}
