import type { MachineHealth } from './machine-health.js';
import type { TransitionTable } from './transition-table.js';

/**
 * What an operator wants of a machine: desired state, set only by `gantry machine
 * cordon|uncordon|drain|remove`, kept apart from its health (observed, `machine-health.ts`), so
 * neither overwrites the other. The scheduler places new work only on a machine that is `ready`
 * and `eligible`.
 */
export const MachineScheduling = {
  /** In service: new work may be placed. Cordon, drain or remove (when lost) move it out. */
  eligible: 'eligible',
  /** No new work; what runs there goes on. Uncordon moves it back, drain to draining, remove forgets it. */
  cordoned: 'cordoned',
  /** No new work, and the operator waits for what runs there to end (then it is shown `drained`).
   *  Uncordon moves it back to eligible, remove forgets it. */
  draining: 'draining',
  /** Forgotten: left out of listings and of the scheduler's cluster; its attempts keep naming it.
   *  Its agent registering again (by name) brings it back as eligible. */
  removed: 'removed',
} as const;
export type MachineScheduling = (typeof MachineScheduling)[keyof typeof MachineScheduling];
export const machineSchedulings = Object.values(MachineScheduling);

export const machineSchedulingTransitions: TransitionTable<MachineScheduling> = {
  eligible: ['cordoned', 'draining', 'removed'],
  cordoned: ['eligible', 'draining', 'removed'],
  // Cordoning a draining machine changes nothing (it already takes no new work), so it is no move.
  draining: ['eligible', 'removed'],
  removed: ['eligible'],
};

/** What clients are shown: a draining machine on which no attempt holds resources any more is `drained`. */
export type ShownScheduling = MachineScheduling | 'drained';

/**
 * `drained` is computed, not stored: nothing new is placed on a draining machine, so once the last
 * attempt there lets go of its resources (its process is gone) it stays drained, and no write on
 * the hot path has to notice the moment.
 */
export function shownScheduling(scheduling: MachineScheduling, heldAttempts: number): ShownScheduling {
  return scheduling === MachineScheduling.draining && heldAttempts === 0 ? 'drained' : scheduling;
}

/** A machine as `removeRefusal` judges it. */
export interface RemoveCandidate {
  name: string;
  health: MachineHealth;
  scheduling: MachineScheduling;
  /** Attempts whose resources are not released yet (their process may still be alive). */
  heldAttempts: number;
  /** Attempts scheduled or running there. */
  activeAttempts: number;
}

/**
 * Why a machine may not be removed, or null when it may: a lost one (its attempts were taken back
 * when it was lost), or a cordoned or drained one with nothing left on it. Removing a machine in
 * service, or one where processes may still run, would hide work that is still going on.
 */
export function removeRefusal(m: RemoveCandidate): string | null {
  const plural = (n: number) => (n === 1 ? '1 attempt' : `${n} attempts`);
  const wait = `wait until it is drained (gantry machine drain ${m.name} --wait)`;
  if (m.health === 'lost') {
    // Losing a machine loses its active attempts in the same transaction; this is a guard only.
    return m.activeAttempts === 0 ? null : `machine ${m.name} is lost but still has ${plural(m.activeAttempts)} placed or running`;
  }
  if (m.scheduling === MachineScheduling.eligible) {
    return `machine ${m.name} is ${m.health} and in service; only a lost machine, or a cordoned or drained one with nothing running, can be removed: drain it first and ${wait}`;
  }
  if (m.heldAttempts > 0) {
    const hold = m.heldAttempts === 1 ? 'holds' : 'hold';
    return `machine ${m.name} is ${m.health} and ${m.scheduling}, and ${plural(m.heldAttempts)} there still ${hold} resources (a process may still be running); ${wait}`;
  }
  return null;
}
