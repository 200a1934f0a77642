import type { QueuedStage } from '../scheduler/snapshot.js';
import type { MachineLifecycle } from './machine-lifecycle.js';
import type { WaitKind } from './plan-scale-up.js';
import type { MisfitKind } from './template-misfit.js';

/**
 * One machine the autoscaler started, as the database keeps it (issue 30, docs/autoscaling.md
 * "The store"). The row is written before the provider is asked, so a restarted server or a new
 * leader finds every start it must see through (ask again, idempotent by `name`) or undo.
 */
export interface AutoscaleRow {
  /** The machine's name: what the provider is asked to start, what its agent registers as, the provider's idempotency key. */
  name: string;
  pool: string;
  lifecycle: MachineLifecycle;
  /** The decision that started it, in words ("3 stages of team vision wait for 8 h100 GPUs: starting 1 machine of template h100"). */
  reason: string;
  /** When the start was decided (ms): its boot timeout runs from here. */
  startedAt: number;
  /** When the provider answered the start (null: not yet asked, or no answer yet). */
  requestedAt: number | null;
  /** What the provider calls it (an instance id), when it said. */
  providerId: string | null;
  /** When its agent registered (null: not yet). */
  joinedAt: number | null;
  /** Its row in `machines` once its agent registered. */
  machineId: string | null;
  /** When it was cordoned for release (null: never, or back in service). */
  drainingAt: number | null;
  /** When it was released (drained and empty, or failed). */
  releasedAt: number | null;
  /** When the provider confirmed the stop (null: not yet asked or not yet answered: the loop asks again). */
  stoppedAt: number | null;
  /**
   * Since when no attempt has held room on its machine (ms): the latest release of an attempt
   * there, or its join when none ran; null while one holds room, before it joined, or once stopped
   * (gone). Computed when read, from the attempts, so scale-down's idle clock survives a restart.
   */
  idleSince: number | null;
  /** Attempts holding room on its machine now (0 once stopped: only rows not at their end are looked up). */
  attempts: number;
  /** Why it failed (did not join within its boot timeout, the provider refused): null unless failed. */
  failReason: string | null;
  /** The waiting stages it is held for (docs/autoscaling.md, "Held for the stages it was started for"); cleared once placed. */
  heldFor: string[];
  updatedAt: number;
}

/** The autoscaler's latest word on a waiting stage it starts nothing for (what `gantry explain` shows). */
export interface AutoscaleWait {
  stageId: string;
  kind: WaitKind | MisfitKind;
  reason: string;
  pool: string | null;
  at: number;
}

/** A verb's answer: the row after it, and whether it changed anything (false: it was already so, or a guard refused). */
export interface AutoscaleChange {
  row: AutoscaleRow;
  changed: boolean;
}

/**
 * The store's autoscaler verbs (Store extends this). Each is one transaction; each write is
 * guarded on the lifecycle it moves from (machine-lifecycle.ts's table), writes an event whose
 * message is the reason (`autoscale:<verb>`, machine events: no job), and answers `changed: false`
 * when the guard did not hold. NotFoundError for an unknown name.
 */
export interface AutoscaleStore {
  /** Rows, oldest start first. `active`: leave out those released and stopped (the end). `pool`: that pool's only. */
  autoscaleRows(p: { active?: boolean; pool?: string }): Promise<AutoscaleRow[]>;
  /**
   * New rows in `provisioning`, one per entry of `heldFor` (the stages each machine is held for;
   * [] for none), named `<pool>-<n>` with n one more than any the pool ever had, skipping names a
   * machine already has. One `autoscale:start` event with `reason`.
   */
  autoscaleStart(p: { pool: string; heldFor: readonly (readonly string[])[]; reason: string; now: number }): Promise<AutoscaleRow[]>;
  /** The provider answered the start: `requestedAt`, `providerId`; provisioning → joining (a row already ready keeps its lifecycle). */
  autoscaleRequested(p: { name: string; providerId?: string | null; now: number }): Promise<AutoscaleChange>;
  /** Adds stages to a starting or ready machine's hold (the simulation counted them onto its spare room). */
  autoscaleHold(p: { name: string; stageIds: readonly string[]; now: number }): Promise<AutoscaleChange>;
  /**
   * The holds of joined machines: each `ready` row with a hold and a machine, with those of its
   * held stages still ready to place now (in the form the scheduler reads its queue; the others are
   * dropped). The scheduler's pass places these first, on that machine (schedulerPass, `holds`).
   */
  autoscaleHeldStages(p: { now: number }): Promise<{ name: string; machineId: string; stages: QueuedStage[] }[]>;
  /** Empties a machine's hold (its held stages were placed, or given their chance). */
  autoscaleHoldClear(p: { name: string; now: number }): Promise<AutoscaleChange>;
  /** ready → draining, with the machine cordoned for draining (scheduling `draining`) in the same transaction. */
  autoscaleDrain(p: { name: string; reason: string; now: number }): Promise<AutoscaleChange>;
  /** draining → ready, the machine back in service: work was found on it. */
  autoscaleKeep(p: { name: string; reason: string; now: number }): Promise<AutoscaleChange>;
  /**
   * draining → released when no attempt holds room on its machine (else `changed: false`: nothing
   * is ever killed), or failed → released; the machine row removed from service (machineRemove's
   * `removed`). The provider's stop follows (autoscaleStopped).
   */
  autoscaleRelease(p: { name: string; reason: string; now: number }): Promise<AutoscaleChange>;
  /** provisioning/joining → failed, with `reason` as failReason (did not join within its boot timeout, the provider refused). */
  autoscaleFail(p: { name: string; reason: string; now: number }): Promise<AutoscaleChange>;
  /** The provider confirmed it stopped a released machine: `stoppedAt`; its machine row, if its agent registered after the release, removed. */
  autoscaleStopped(p: { name: string; now: number }): Promise<AutoscaleChange>;
  /** Replaces the autoscaler's latest word on waiting stages (at most the first 1,000 kept). */
  autoscaleWaitsPut(p: { waits: readonly Omit<AutoscaleWait, 'at'>[]; now: number }): Promise<void>;
  /** What the autoscaler last said of this stage; null when it said nothing (or no autoscaler runs). */
  autoscaleWaitOf(p: { stageId: string }): Promise<AutoscaleWait | null>;
}
