import type { TransitionTable } from './transition-table.js';

/**
 * Whether a machine is alive, as its heartbeats tell the server: observed state. What an operator
 * wants of it (cordoned, draining, removed) is the other half of its state, kept apart in
 * `machine-scheduling.ts`, as Nomad keeps a node's status apart from its scheduling eligibility:
 * a cordoned machine that dies is still found lost, and a draining one that comes back after a
 * blip is still draining.
 */
export const MachineHealth = {
  /** Heartbeating. Missed heartbeats move it to suspect (reconciler). */
  ready: 'ready',
  /** Missed heartbeats; nothing new is placed. A heartbeat moves it back to ready, more silence to lost. */
  suspect: 'suspect',
  /** Silent past the loss deadline; its attempts were marked lost. A heartbeat or re-registering moves it to ready. */
  lost: 'lost',
} as const;
export type MachineHealth = (typeof MachineHealth)[keyof typeof MachineHealth];
export const machineHealths = Object.values(MachineHealth);

export const machineTransitions: TransitionTable<MachineHealth> = {
  ready: ['suspect', 'lost'],
  suspect: ['ready', 'lost'],
  lost: ['ready'],
};
