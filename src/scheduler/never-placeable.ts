import { fitChecks, type StageNeed } from './checks.js';
import { pendingReason, type MachineReject } from './pending-reason.js';
import type { MachineView } from './snapshot.js';

/**
 * Why no registered machine could ever run a stage, even idle and in service (a GPU type nobody
 * has, more GPUs than any machine, a label no machine carries), or null when one could. What a
 * submit is warned with, before the stage would wait in the queue for good. With no machines
 * registered yet, nothing is judged: they may still be joining. `withPools`: `machines` include
 * the autoscaled pools' templates (a machine that may come), and the reason says so.
 */
export function neverPlaceable(need: StageNeed, machines: readonly MachineView[], withPools = false): string | null {
  const registered = machines.filter((m) => m.scheduling !== 'removed');
  if (registered.length === 0) return null;
  const rejects: MachineReject[] = [];
  for (const m of registered) {
    const reason = fitChecks.map((check) => check(need, m)).find((r) => r !== null);
    if (reason === undefined) return null;
    rejects.push({ health: 'ready', scheduling: 'eligible', reason });
  }
  const none = withPools ? 'no registered machine nor autoscaled pool could ever run it: ' : 'no registered machine could ever run it: ';
  return pendingReason(need, rejects).replace(/^no ready machine can run it: /, none);
}
