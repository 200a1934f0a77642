import type { StageChange, StageNode } from './advance.js';

/**
 * The advancer's safety net, run by the reconciler over jobs that have not changed for a while:
 * the moves the advancer would have made had it seen the job's stages as they are now. In a
 * healthy system it finds nothing (every outcome advances its job in the same transaction); it
 * exists so that a job can never sit forever between two states.
 */
export function repairChanges(stages: readonly StageNode[]): StageChange[] {
  const byName = new Map(stages.map((s) => [s.name, s]));
  const failed = stages.find((s) => s.state === 'failed');
  const out: StageChange[] = [];
  for (const s of stages) {
    if (failed && (s.state === 'pending' || s.state === 'ready')) {
      out.push({ name: s.name, from: s.state, to: 'skipped', reason: `job failing: stage ${failed.name} failed (found by the reconciler)` });
    } else if (!failed && s.state === 'pending' && s.needs.every((n) => byName.get(n)?.state === 'succeeded')) {
      out.push({ name: s.name, from: 'pending', to: 'ready', reason: null });
    } else if (s.state === 'pending' && s.needs.some((n) => ['skipped', 'canceled'].includes(byName.get(n)?.state ?? ''))) {
      out.push({ name: s.name, from: 'pending', to: 'skipped', reason: 'an upstream stage did not run (found by the reconciler)' });
    }
  }
  return out;
}
