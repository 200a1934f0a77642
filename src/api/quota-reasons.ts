import type { StageDefinition } from '../domain/job-definition.js';
import { stageNeed, type StageNeed } from '../scheduler/checks.js';
import { gangNeedOf, gangTotal } from '../scheduler/gang-placer.js';
import type { MachineView } from '../scheduler/snapshot.js';
import { TeamLedger } from '../scheduler/team-ledger.js';
import type { Store } from '../store/store.js';

/**
 * Why stages of a team wait on its quota, as the scheduler's pass decides it (TeamLedger): the
 * quota line ("team vision at quota: uses 15 of 16 h100 GPUs, the stage needs 2") for each stage that is not
 * preemptible and would take its team past its quota (a gang: all its members), else nothing. One
 * read of teams and usage.
 */
export async function quotaReasons(
  store: Pick<Store, 'schedulerTeams'>,
  team: string,
  stages: readonly { id: string; definition: StageDefinition }[],
  machines: readonly MachineView[],
): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const firm = stages.filter((s) => !s.definition.preemptible);
  if (firm.length === 0) return out;
  const teams = await store.schedulerTeams({ usage: true });
  const t = teams.find((x) => x.name === team);
  if (!t || Object.keys(t.quota).length === 0) return out;
  const ledger = new TeamLedger(teams, machines);
  for (const s of firm) {
    const { blocked } = ledger.withinQuota(team, quotaNeedOf(s.definition), machines);
    if (blocked) out.set(s.id, blocked);
  }
  return out;
}

/** What a stage is charged to its team's quota, as the pass charges it: a gang all its members at once (gangTotal). */
export function quotaNeedOf(stage: Pick<StageDefinition, 'resources' | 'placement'>): StageNeed {
  const gang = gangNeedOf(stage);
  return gang ? gangTotal(gang) : stageNeed(stage);
}
