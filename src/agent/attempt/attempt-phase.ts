import { canTransition, type TransitionTable } from '../../domain/transition-table.js';

/**
 * Where one attempt stands on this agent, declared once (as the server's states are), with one
 * transition table over every phase: what used to be flags beside a phase (acknowledgement queued,
 * process ended, outcome queued, delivery under way, detached) are phases here. Whether the server
 * still wants the attempt is the runner's typed drop reason (drop-reason.ts), which the runner
 * checks after every step; a dropped attempt still moves through the table to `dropped`.
 *
 *   accepted ─▶ acknowledging ─▶ starting ─▶ running ─▶ killing ─▶ ended ─▶ owed ─▶ shipping-log ─▶ reporting ─▶ delivered
 *      │              │              └──────────┴──────────────────▲  │        ▲  └────────◀───────────┘ (later)
 *      │              ├─▶ ended (inputs failed, dropped before the spawn)      │
 *      │              └─▶ forgotten / dropped (not acknowledged / stale)       └─ dropped, abandoned (given up), left
 *      ├─▶ starting, ended (started at placement: no acknowledgement, docs/agent.md)
 *      └─▶ running (re-attached after a restart), owed (its exit recorded before a restart)
 */
export const AttemptPhase = {
  /** Its directory being made: nothing asked of the server yet. Moved on by the runner once it exists
   *  (to its acknowledgement, or, started at placement, to its spawn once its inputs are in). */
  accepted: 'accepted',
  /** Its acknowledgement handed to the reporter, its inputs fetched meanwhile: nothing runs yet. Moved on by the answer. */
  acknowledging: 'acknowledging',
  /** Its process being spawned; its pid not known yet. Moved on when the spawn answers. */
  starting: 'starting',
  /** Its process runs (started by this agent, or re-attached to after a restart). Listed in heartbeats. */
  running: 'running',
  /** A kill was sent (the server decided, or will): its group gets TERM, then KILL after the grace. Listed until it is gone. */
  killing: 'killing',
  /** Its process is over (or never started); its exit being recorded on disk, a dropped one's last log lines shipped. */
  ended: 'ended',
  /** Its exit recorded: log, outputs and outcome are owed to the server; waiting for the next try (after an outage, the next heartbeat that gets through). */
  owed: 'owed',
  /** A delivery under way: what is left of its log going to the server (the outcome waits for all of it). */
  shippingLog: 'shipping-log',
  /** A delivery under way: its outputs uploaded, then its outcome an item of the next report. */
  reporting: 'reporting',
  /** The server answered its outcome (recorded, a duplicate, or stale). Nothing more is owed. */
  delivered: 'delivered',
  /** The server decided (a kill, a stale answer, a refusal) or will (a lost lease, the agent stopping): nothing reported. */
  dropped: 'dropped',
  /** Its outcome could not be delivered for too long: given up, the server takes the attempt as lost. */
  abandoned: 'abandoned',
  /** Never acknowledged, or assigned twice: nothing ran and nothing is recorded (the server's resend runs anew). */
  forgotten: 'forgotten',
  /** The agent stopped and left it (its process runs on, or its outcome stays on disk): the next start takes it over. */
  left: 'left',
} as const;
export type AttemptPhase = (typeof AttemptPhase)[keyof typeof AttemptPhase];

export const attemptTransitions: TransitionTable<AttemptPhase> = {
  // accepted -> starting / ended: started at placement, so not acknowledged (its inputs failed, or a kill came, before the spawn).
  accepted: ['acknowledging', 'starting', 'ended', 'running', 'owed', 'dropped', 'forgotten'],
  acknowledging: ['starting', 'ended', 'dropped', 'forgotten'],
  starting: ['running', 'killing', 'ended', 'left'],
  running: ['killing', 'ended', 'left'],
  killing: ['ended'],
  ended: ['owed', 'dropped', 'left'],
  owed: ['shipping-log', 'reporting', 'dropped'],
  'shipping-log': ['owed', 'reporting', 'dropped', 'abandoned'],
  reporting: ['owed', 'delivered', 'dropped', 'abandoned'],
  delivered: [],
  dropped: [],
  abandoned: [],
  forgotten: [],
  left: [],
};

/** Phases with no way out: the runner's `done` settles on entering one. */
export function isFinal(phase: AttemptPhase): boolean {
  return attemptTransitions[phase].length === 0;
}

/** The next phase, or a throw: a move the table does not allow is a bug in the agent. */
export function nextPhase(attemptId: string, from: AttemptPhase, to: AttemptPhase): AttemptPhase {
  if (!canTransition(attemptTransitions, from, to)) throw new Error(`attempt ${attemptId}: ${from} → ${to} is not a move an attempt makes`);
  return to;
}

/** Before its process: what a kill finds nothing to signal in yet. */
export function isBeforeProcess(phase: AttemptPhase): boolean {
  return phase === AttemptPhase.accepted || phase === AttemptPhase.acknowledging;
}

/** Its process may still run (or be about to): what a kill is for, and what a lost heartbeat makes the agent give up. */
export function mayRun(phase: AttemptPhase): boolean {
  return isBeforeProcess(phase) || phase === AttemptPhase.starting || phase === AttemptPhase.running;
}

/** A delivery is under way. */
export function isDelivering(phase: AttemptPhase): boolean {
  return phase === AttemptPhase.shippingLog || phase === AttemptPhase.reporting;
}
