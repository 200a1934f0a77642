import { StaleAttemptError } from '../../domain/errors.js';
import { errorText } from '../../lib/error-text.js';
import { MachineScheduling } from '../../domain/machine-scheduling.js';
import type { AttemptCompletion, MachineReportResult, ReportItemOutcome } from '../store.js';
import { completeLoaded, logCutWithoutWrites, REPORTED_ATTEMPT_COLUMNS, startLoaded, startMany } from './attempt-verbs.js';
import { completeMany, type PlainOutcome } from './complete-many.js';
import { isAttemptActive } from '../../domain/attempt-state.js';
import { isSuccessfulEnd } from '../../domain/attempt-end-policy.js';
import { type JobStageRows, stagesOfJobs } from './apply-outcome.js';
import { prepared, preparedList } from './prepared-query.js';
import { SavepointsNeeded, TransactionAborted, type TxContext } from './tx-context.js';
import { isTransientDbError } from './transient-db-error.js';
import { startOnPlacement } from './start-on-placement.js';
import { StartsNeedSerializable } from './starts-read-committed.js';

const reportingMachine = prepared<[id: string]>()((db, [id]) =>
  db.selectFrom('machines').select(['id', 'name']).where('id', '=', id).where('scheduling', '!=', MachineScheduling.removed),
);

/**
 * An agent's batched report: acknowledgements, pids and outcomes of many attempts in one
 * transaction, so one commit (one fsync) carries what used to take one each. Every item is
 * fenced exactly as its single-attempt verb is, and runs under its own savepoint: an item that is
 * stale (`stale`) or fails in any other way (`refused`) changes nothing and gets its own answer,
 * and the others still count. Only the loss of the whole transaction fails the whole report.
 * An attempt placed on another machine is stale here: a machine speaks only for its own work.
 */
export async function machineReport(
  tx: TxContext,
  p: {
    machineId: string;
    started: { attemptId: string; token: number; pid: number | null }[];
    completed: AttemptCompletion[];
    leaseMs: number;
    /** A fresh jitter per outcome, so stages failing together do not retry together. */
    jitter: () => number;
    onItemError?: (attemptId: string, err: unknown) => void;
    startOnPlacement?: boolean;
    /**
     * This transaction is READ COMMITTED (kysely-store.ts machineReport): only starts whose writes
     * are guarded on their own rows may be written in it (starts-read-committed.ts); anything else
     * throws StartsNeedSerializable before anything is written.
     */
    readCommitted?: boolean;
  },
): Promise<MachineReportResult | null> {
  // A removed machine is unknown to its agent, as in a heartbeat: it registers again, then resends.
  const m = await reportingMachine.first(tx.db, p.machineId);
  if (!m) return null;
  const ids = [...new Set([...p.started, ...p.completed].map((i) => i.attemptId))];
  const rows = new Map<string, Awaited<ReturnType<typeof loadMany>>[number]>();
  for (const r of await loadMany(tx, ids)) rows.set(r.id, r);

  const touched = new Set<string>();
  /** Jobs an earlier item of this report may have moved: their state as read above is stale. */
  const jobsTouched = new Set<string>();
  const item = async (
    attemptId: string,
    fn: (a: NonNullable<ReturnType<typeof rows.get>>, jobState: string | undefined) => Promise<ReportItemOutcome>,
  ): Promise<ReportItemOutcome> => {
    // Read again when an earlier item of this report touched the same attempt (start, then its pid).
    const a = touched.has(attemptId) ? (await loadMany(tx, [attemptId]))[0] : rows.get(attemptId);
    if (!a) return { attemptId, result: 'stale', message: 'unknown attempt' };
    if (a.machine_id !== m.id) return { attemptId, result: 'stale', message: `attempt is placed on another machine` };
    touched.add(attemptId);
    const jobState = jobsTouched.has(a.job_id) ? undefined : a.job_state;
    jobsTouched.add(a.job_id);
    try {
      return await tx.savepoint(() => fn(a, jobState));
    } catch (err) {
      if (err instanceof StaleAttemptError) return { attemptId, result: 'stale', message: err.reason };
      // The whole transaction is gone: the report fails as one, and is resent.
      if (err instanceof TransactionAborted) throw err;
      // Anything else is this item's alone (a bug it trips, a constraint): it is refused, with
      // nothing of it written, so that one bad item cannot hold back every other the agent sends.
      p.onItemError?.(attemptId, err);
      return { attemptId, result: 'refused', message: `not recorded: ${errorText(err)}` };
    }
  };

  // A transaction's first run (savepoints only when needed): the plain acknowledgements go in one
  // statement per table, and the stages of the completions' jobs are read in one (docs/throughput.md,
  // "A report's items in batches"). Only items alone in the report with their attempt and their job:
  // nothing else of the report writes what they read. A careful rerun takes each item alone again.
  const batched = new Map<string, ReportItemOutcome>();
  if (p.readCommitted && !tx.optimistic) throw new StartsNeedSerializable('a run with savepoints');
  let stages = new Map<string, JobStageRows>();
  const plainOutcomes: PlainOutcome[] = [];
  if (tx.optimistic) {
    const perAttempt = new Map<string, number>();
    const perJob = new Map<string, number>();
    for (const i of [...p.started, ...p.completed]) {
      perAttempt.set(i.attemptId, (perAttempt.get(i.attemptId) ?? 0) + 1);
      const a = rows.get(i.attemptId);
      if (a) perJob.set(a.job_id, (perJob.get(a.job_id) ?? 0) + 1);
    }
    const alone = (attemptId: string) => {
      const a = rows.get(attemptId);
      return a && perAttempt.get(attemptId) === 1 && perJob.get(a.job_id) === 1 && a.machine_id === m.id && a.gang_id === null ? a : undefined;
    };
    let plain = p.started.flatMap((s) => {
      const a = alone(s.attemptId);
      return a && s.pid === null && a.state === 'scheduled' && Number(a.token) === s.token ? [a] : [];
    });
    // Before anything is written: a report READ COMMITTED holds starts whose every write is guarded
    // on its own row (starts-read-committed.ts), and nothing else. Those not in `plain` (two of one
    // job) go alone, through startLoaded, guarded the same way.
    if (p.readCommitted) {
      const guarded = p.started.every((s) => {
        const a = rows.get(s.attemptId);
        return (
          a &&
          perAttempt.get(s.attemptId) === 1 &&
          s.pid === null &&
          a.machine_id === m.id &&
          a.gang_id === null &&
          a.state === 'scheduled' &&
          Number(a.token) === s.token
        );
      });
      if (p.completed.length > 0 || !guarded) throw new StartsNeedSerializable('an item other than a start its own guards keep right');
      // Starts alone: two of one job go together too (startMany writes each job once), never
      // through the per-item path, whose writes answer `stale` where READ COMMITTED must not.
      plain = p.started.map((s) => rows.get(s.attemptId)!);
    }
    if (plain.length) {
      const ok = await batch(() => startMany(tx, plain, { leaseMs: p.leaseMs, machineName: m.name, readCommitted: p.readCommitted === true })).catch(
        (err: unknown) => {
          // READ COMMITTED, an item the database refused is not taken alone here: SERIALIZABLE, as before, takes it.
          if (p.readCommitted && err instanceof SavepointsNeeded) throw new StartsNeedSerializable('a start the database refused');
          throw err;
        },
      );
      for (const a of plain) {
        touched.add(a.id);
        jobsTouched.add(a.job_id);
        batched.set(a.id, ok.has(a.id) ? { attemptId: a.id, result: 'ok' } : { attemptId: a.id, result: 'stale', message: 'attempt changed while starting' });
      }
    }
    const jobs = p.completed.flatMap((c) => alone(c.attemptId)?.job_id ?? []);
    if (jobs.length) stages = await batch(() => stagesOfJobs(tx, jobs));
    // The plain outcomes, written set-based below (complete-many.ts): each fenced here as
    // completeLoaded fences it; a stale, repeated, gang's, files-committing or log-marking one goes alone.
    for (const c of tx.setBased ? p.completed : []) {
      const a = alone(c.attemptId);
      const known = a && stages.get(a.job_id);
      if (!a || !known || Number(a.token) !== c.token || !isAttemptActive(a.state)) continue;
      if (c.outputs.length > 0 && isSuccessfulEnd(c)) continue;
      const logCut = logCutWithoutWrites(a, c.logBytes);
      if (logCut === undefined) continue;
      plainOutcomes.push({ a, c, stages: known, logCut, jitter: p.jitter() });
    }
  }

  const started: ReportItemOutcome[] = [];
  for (const s of p.started) {
    const done = batched.get(s.attemptId);
    if (done) {
      started.push(done);
      continue;
    }
    started.push(
      await item(s.attemptId, async (a, jobState) => ({
        attemptId: s.attemptId,
        result: await startLoaded(tx, a, { token: s.token, pid: s.pid, leaseMs: p.leaseMs, machineName: m.name, jobState }),
      })),
    );
  }
  if (plainOutcomes.length) {
    for (const [id, r] of await batch(() => completeMany(tx, plainOutcomes))) batched.set(id, r);
    for (const o of plainOutcomes) {
      touched.add(o.a.id);
      jobsTouched.add(o.a.job_id);
    }
  }
  const completed: ReportItemOutcome[] = [];
  for (const c of p.completed) {
    const done = batched.get(c.attemptId);
    if (done) {
      completed.push(done);
      continue;
    }
    completed.push(
      await item(c.attemptId, async (a) => {
        const known = stages.get(a.job_id);
        const r = await completeLoaded(tx, a, { ...c, jitter: p.jitter(), ...(known ? { stages: known } : {}) });
        return { attemptId: c.attemptId, result: r.accepted ? 'ok' : 'duplicate', jobState: r.jobState };
      }),
    );
  }
  // Asked once its items are written: the pass before this transaction's commit starts what it
  // places here (start-on-placement.ts). Only with outcomes: they are what makes room.
  if (p.startOnPlacement && p.completed.length) startOnPlacement(tx.db).ask(m.id);
  return { started, completed };
}

/**
 * A batch of a report's items that failed: only each item alone can say whose failure it was, so
 * the transaction runs again with savepoints, item by item (SavepointsNeeded); a conflict runs it
 * again as any does, and a transaction already gone stays gone.
 */
async function batch<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof TransactionAborted || err instanceof StartsNeedSerializable) throw err;
    if (isTransientDbError(err)) throw new TransactionAborted(err, null);
    throw new SavepointsNeeded(err);
  }
}

/** A report's attempts, read by id in lists (one prepared text per length), each with its job's state. */
const attemptsById = preparedList((db, ids) =>
  db
    .selectFrom('attempts')
    .innerJoin('jobs', 'jobs.id', 'attempts.job_id')
    .select(REPORTED_ATTEMPT_COLUMNS.map((c) => `attempts.${c}` as const))
    .select('jobs.state as job_state')
    .where('attempts.id', 'in', ids),
);
const loadMany = (tx: TxContext, ids: string[]) => attemptsById.rows(tx.db, ids);
