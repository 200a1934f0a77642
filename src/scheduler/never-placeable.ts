import { type Check, fitChecks, type StageNeed } from './checks.js';
import { gangPendingReasonNow, type GangNeed } from './gang-placer.js';
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
  // Each submitted stage asks this of every machine, and at 10,000 machines a copy of the list
  // and an array of the checks' answers per machine, for a stage the first machine fits, were a
  // submit batch's longest stretch of the event loop (bench:fleet's profile under load): the
  // checks run one by one and stop at the first refusal, and a fit ends the search.
  const rejects: MachineReject[] = [];
  for (const m of machines) {
    if (m.scheduling === 'removed') continue;
    let reason: ReturnType<Check> = null;
    for (const check of fitChecks) if ((reason = check(need, m)) !== null) break;
    if (reason === null) return null;
    rejects.push({ health: 'ready', scheduling: 'eligible', reason });
  }
  if (rejects.length === 0) return null;
  const none = withPools ? 'no registered machine nor autoscaled pool could ever run it: ' : 'no registered machine could ever run it: ';
  return pendingReason(need, rejects).replace(/^no ready machine can run it: /, none);
}

/**
 * The same for a gang (docs/gangs.md): why its members could never all be placed at once on the
 * registered machines, even idle and in service (too few machines with its GPUs, in one value of
 * its sameLabel), or null when they could. Judges nothing while no machine is registered.
 * `withPools`: `machines` include the machines the autoscaled pools may start, and the reason says so.
 */
export function gangNeverPlaceable(gang: GangNeed, machines: readonly MachineView[], withPools = false): string | null {
  const registered = machines.filter((m) => m.scheduling !== 'removed');
  if (registered.length === 0) return null;
  const idle = registered.map(asIdle);
  const why = gangPendingReasonNow(gang, idle);
  return why === null ? null : `${withPools ? 'no registered machines nor autoscaled pools' : 'no registered machines'} could ever run it: ${why}`;
}

/** A machine as static checks see it: healthy, in service, nothing held (its facts are what it is). */
function asIdle(m: MachineView): MachineView {
  return { ...m, health: 'ready', scheduling: 'eligible' };
}
