import type { RerunPlan } from '../advancer/rerun-plan.js';
import type { JobDefinition } from '../domain/job-definition.js';
import type { JobDetail } from './records.js';
import type { Idempotency } from './store.js';

/** What the store's rerun and artifact verbs take and give (docs/rerun.md). */

/**
 * What deleting jobs leaves to do on disk. `attempts`: the deleted attempts. `legacyDirs`: those of
 * them whose directory (`<artifacts>/<attemptId>/`, written before 0014) holds no file any job still
 * names: the caller removes these. Blobs are collected apart (artifactsCollect).
 */
export interface DeletedFiles {
  attempts: string[];
  legacyDirs: string[];
}

export interface RerunParams {
  jobId: string;
  /** Stages to start from; none: every failed, skipped or canceled one. */
  from?: readonly string[];
  /** The new job's definition (a changed spec, checked against the original); none: the original's. */
  definition?: JobDefinition;
  /** The new spec's text as kept with the job; none: the original's. */
  source?: string | null;
  /** A job not ended is canceled first, in the same transaction. */
  cancelRunning?: boolean;
  /** Plan only: nothing is written (a job not ended is planned as if canceled, with cancelRunning). */
  dryRun?: boolean;
  /** The cancel's reason, when the job is canceled first. */
  cancelReason?: string;
  idempotency?: Idempotency;
}

export interface RerunResult {
  plan: RerunPlan;
  /** The new job; null for a dry run. */
  job: JobDetail | null;
  /** The original was canceled first (cancelRunning). */
  canceled: boolean;
}

/** What collection decided (artifactsCollect). Sizes in bytes. */
export interface CollectionPlan {
  /** The store before: every blob's bytes, and how many blobs. */
  totalBytes: number;
  blobs: number;
  budgetBytes: number | null;
  /** Blobs to delete, oldest unreferenced first; `released`: freed by a release below. */
  collect: { blob: string; size: number; unreferencedSince: number; why: 'unreferenced' | 'released' }[];
  /** Stages of ended jobs whose outputs the budget releases, oldest ended first. */
  release: { jobId: string; stage: string; stageId: string; files: number; bytes: number; endedAt: number }[];
  /** The store's bytes once this is done (still over the budget when what is left is protected). */
  bytesAfter: number;
  /** More unreferenced blobs than one call collects: the next call goes on. */
  more: boolean;
}
