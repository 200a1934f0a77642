import type { Clock } from '../domain/clock.js';
import { jobRepair } from '../reconciler/job-repair.js';
import { lostAttempts } from '../reconciler/lost-attempts.js';
import { lostMachines } from '../reconciler/lost-machines.js';
import { pruning } from '../reconciler/pruning.js';
import { queueTimeout } from '../reconciler/queue-timeout.js';
import { retention } from '../reconciler/retention.js';
import type { HeardAt, ReapResult, Store } from '../store/store.js';
import { dutyLoop } from './duty-loop.js';
import type { Loop } from './loop.js';
import type { ServerConfig } from './server-config.js';

/** The reconciler: one loop per duty, in the order a test that runs them all by hand should take. */
export interface ReconcilerLoops {
  lostMachines: Loop;
  lostAttempts: Loop;
  queueTimeout: Loop;
  repair: Loop;
  pruning: Loop;
  retention: Loop;
}

/** What the loops say: the control plane's logger, or a test's. */
export interface DutyLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/**
 * The reconciler's loops (docs/failure-detection.md, "The reconciler's loops"): make the database
 * agree with the world as heartbeats describe it, and delete what has been kept long enough. Each
 * duty has its loop, so one that throws on every pass (a bad row, a slow query timing out) is
 * logged under its name and holds back none of the others. None judges anything before
 * `judgeFrom()`: after a restart every heartbeat looks old (the restart grace).
 */
export function reconcilerLoops(d: {
  store: Store;
  clock: Clock;
  config: ServerConfig;
  log: DutyLog;
  onError: (loop: string) => (err: unknown) => void;
  random: () => number;
  judgeFrom: () => number;
  /** Arrivals this replica holds and has not written yet (HeartbeatLiveness.heardAt), for the lost-machines duty. */
  heard?: HeardAt;
  /** Removes attempt directories written before 0014 that no job names a file in any more. */
  removeLegacyDirs: (attemptIds: string[]) => Promise<void>;
}): ReconcilerLoops {
  const { store, clock, config, log } = d;
  const p = { onError: d.onError, random: d.random, ready: () => clock.now() >= d.judgeFrom() };
  const reaped = (r: ReapResult) => {
    for (const m of r.machines) log.warn(m, 'machine health changed');
    if (r.lostAttempts.length) log.warn({ attempts: r.lostAttempts }, 'attempts lost');
    // Judged again at the next pass (reap-batches.ts): a conflict that outlasted every try.
    if (r.deferred) log.warn({ deferred: r.deferred }, 'left to the next pass: the database kept refusing them');
  };
  return {
    lostMachines: dutyLoop(lostMachines(store, clock, config, d.random, d.heard), reaped, p),
    lostAttempts: dutyLoop(lostAttempts(store, clock, config, d.random), reaped, p),
    queueTimeout: dutyLoop(
      queueTimeout(store, clock, config),
      (stages) => {
        if (stages.length) log.warn({ stages }, 'stages failed: waited past their queueTimeoutSeconds');
      },
      p,
    ),
    repair: dutyLoop(
      jobRepair(store, clock, config),
      (jobs) => {
        if (jobs.length) log.warn({ jobs }, 'jobs re-evaluated by the reconciler');
      },
      p,
    ),
    pruning: dutyLoop(
      pruning(store, clock, config),
      (r) => {
        if (r.audit) log.info({ rows: r.audit }, 'audit rows past their retention deleted');
        if (r.tokens) log.info({ tokens: r.tokens }, 'tokens revoked or expired past their retention deleted');
      },
      p,
    ),
    retention: dutyLoop(
      retention(store, clock, config, d.removeLegacyDirs),
      (jobs) => {
        if (jobs.length) log.info({ jobs: jobs.length }, 'ended jobs past retention deleted');
      },
      p,
    ),
  };
}
