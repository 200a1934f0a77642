import type { TransitionTable } from '../domain/transition-table.js';

/**
 * Where a machine the autoscaler started is in its life (issue 30): desired and observed state of
 * the provider's side, kept apart from the machine's health (heartbeats) and scheduling (operator),
 * as those are kept apart from each other. A machine an operator listed in `machines:` has none.
 */
export const MachineLifecycle = {
  /** Asked of the provider; nothing heard back yet. The provider's answer moves it to joining, its agent registering to ready, the boot timeout to failed. */
  provisioning: 'provisioning',
  /** The provider says it started; its agent has not registered yet. Registering moves it to ready, the boot timeout to failed. */
  joining: 'joining',
  /** Its agent registered; it takes work. Idle past its pool's idleSeconds (and above min), the autoscaler moves it to draining. */
  ready: 'ready',
  /** Cordoned for release: no new work. Empty, it is released; work found on it (placed before the cordon) moves it back to ready. */
  draining: 'draining',
  /** Did not join within its boot timeout (or the provider refused it): reported, then released; the pool's next start waits a backoff. */
  failed: 'failed',
  /** The provider stopped it. The end. */
  released: 'released',
} as const;
export type MachineLifecycle = (typeof MachineLifecycle)[keyof typeof MachineLifecycle];
export const machineLifecycles = Object.values(MachineLifecycle);

export const machineLifecycleTransitions: TransitionTable<MachineLifecycle> = {
  // An agent may register before the provider's answer is read (a fast boot, a restarted server):
  // provisioning goes straight to ready then.
  provisioning: ['joining', 'ready', 'failed'],
  joining: ['ready', 'failed'],
  ready: ['draining'],
  // Back to ready only when work is found on it: a scale-down never waits for, nor kills, a running stage.
  draining: ['ready', 'released'],
  failed: ['released'],
  released: [],
};

/** States in which a machine counts toward its pool's size (min and max): all but the ones that are gone or going. */
export const COUNTED_STATES: ReadonlySet<MachineLifecycle> = new Set([MachineLifecycle.provisioning, MachineLifecycle.joining, MachineLifecycle.ready]);

/** States in which a machine is on its way in: supply the autoscaler counts before it can take work. */
export const STARTING_STATES: ReadonlySet<MachineLifecycle> = new Set([MachineLifecycle.provisioning, MachineLifecycle.joining]);
