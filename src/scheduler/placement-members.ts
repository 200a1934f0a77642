import type { GangMember, PlannedPlacement } from './snapshot.js';

/**
 * Every machine a placement takes room on, with its devices: a gang's members (issue 31), or the
 * placement itself as rank 0 of one. What appliers, re-checks and anything counting busy machines
 * read, so that a gang is never taken for its rank 0 alone (docs/gangs.md).
 */
export function placementMembers(p: PlannedPlacement): GangMember[] {
  return p.members ?? [{ rank: 0, machineId: p.machineId, gpuIndices: p.gpuIndices }];
}
