import type { TransitionTable } from './transition-table.js';

export const MachineHealth = {
  /** Heartbeating; new work may be placed. Missed heartbeats move it to suspect (reconciler). */
  ready: 'ready',
  /** An operator asked it to finish its work and take no more. */
  draining: 'draining',
  /** Missed heartbeats; nothing new is placed. A heartbeat moves it back to ready, more silence to lost. */
  suspect: 'suspect',
  /** Silent past the loss deadline; its attempts were marked lost. Re-registering moves it to ready. */
  lost: 'lost',
  /** Taken out of service by an operator; nothing is placed until it is uncordoned. */
  cordoned: 'cordoned',
} as const;
export type MachineHealth = (typeof MachineHealth)[keyof typeof MachineHealth];
export const machineHealths = Object.values(MachineHealth);

export const machineTransitions: TransitionTable<MachineHealth> = {
  ready: ['draining', 'suspect', 'lost', 'cordoned'],
  draining: ['ready', 'suspect', 'lost', 'cordoned'],
  suspect: ['ready', 'lost', 'cordoned'],
  lost: ['ready', 'cordoned'],
  cordoned: ['ready'],
};
