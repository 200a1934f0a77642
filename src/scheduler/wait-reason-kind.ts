import { firstReject, isBusyReason, RejectReason, type StageNeed } from './checks.js';
import type { MachineView } from './snapshot.js';

/** Every code waitReasonKind may answer: a metric's series exist for each, at 0 when none waits so. */
export const WAIT_REASON_KINDS: readonly string[] = ['placeable', ...Object.values(RejectReason), 'no-machines'];

/**
 * Why the stages of a shape wait, as one code (a metric's label, the pools page's group):
 * `placeable` when some machine has room now (the next pass places them), else the reject code
 * most machines give, busy codes first (they say "capacity", the static ones "no machine ever"),
 * or `no-machines`.
 */
export function waitReasonKind(need: StageNeed, machines: readonly MachineView[]): string {
  if (machines.length === 0) return 'no-machines';
  const counts = new Map<string, number>();
  let busy = false;
  for (const m of machines) {
    const r = firstReject(need, m);
    if (r === null) return 'placeable';
    if (isBusyReason(r)) busy = true;
    counts.set(r, (counts.get(r) ?? 0) + 1);
  }
  const pick = [...counts].filter(([r]) => !busy || isBusyReason(r as never)).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  return pick[0]![0];
}
