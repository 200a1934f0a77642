import type { QueuedStage } from '../../../src/scheduler/snapshot.js';
import { teamOf, type TeamLedger } from '../../../src/scheduler/team-ledger.js';

// Frozen with the reference planner: src's fairOrder became a step function (no generator) in
// the work of issue 32; this is the generator the reference planned with, unchanged.

/**
 * The fair-share order over stages already sorted by `compare` (priority, then age): at each step,
 * of each team's next stage, the one of highest priority; among equal priorities, the team of the
 * lowest dominant share over weight now (the ledger grows as the caller places); then `compare`.
 * A team's own stages keep their order. O(teams) a step.
 */
export function* fairOrder(sorted: readonly QueuedStage[], ledger: TeamLedger, compare: (a: QueuedStage, b: QueuedStage) => number): Generator<QueuedStage> {
  const lanes = new Map<string, { stages: QueuedStage[]; at: number }>();
  for (const s of sorted) {
    const t = teamOf(s);
    const lane = lanes.get(t) ?? { stages: [], at: 0 };
    lane.stages.push(s);
    lanes.set(t, lane);
  }
  if (lanes.size === 1) {
    yield* sorted;
    return;
  }
  for (;;) {
    let best: { team: string; stage: QueuedStage; share: number } | null = null;
    for (const [team, lane] of lanes) {
      const stage = lane.stages[lane.at];
      if (stage === undefined) continue;
      if (best === null || stage.priority > best.stage.priority) {
        best = { team, stage, share: ledger.share(team) };
        continue;
      }
      if (stage.priority < best.stage.priority) continue;
      const share = ledger.share(team);
      if (share < best.share || (share === best.share && compare(stage, best.stage) < 0)) best = { team, stage, share };
    }
    if (best === null) return;
    lanes.get(best.team)!.at += 1;
    yield best.stage;
  }
}
