import { stageNeed } from './checks.js';
import { gangNeedOf, gangPendingReasonNow } from './gang-placer.js';
import { pendingReasonNow } from './pending-reason.js';
import type { MachineView, QueuedStage } from './snapshot.js';

/**
 * Why a ready stage waits, asked now of the cluster as it is (status, explain, the pools page):
 * a gang by what set of machines it lacks (docs/gangs.md), any other stage by its one machine.
 * Null: it fits now (the next pass places it).
 */
export function stageReasonNow(stage: Pick<QueuedStage, 'resources' | 'placement'>, machines: readonly MachineView[]): string | null {
  const gang = gangNeedOf(stage);
  return gang ? gangPendingReasonNow(gang, machines) : pendingReasonNow(stageNeed(stage), machines);
}
