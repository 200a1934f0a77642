import { deriveJobState } from '../../advancer/derive-job-state.js';
import { initialStageState } from '../../advancer/advance.js';
import { AlreadySubmitted, ConflictError } from '../../domain/errors.js';
import { newId } from '../../domain/ids.js';
import type { JobDefinition } from '../../domain/job-definition.js';
import { jobTransitions, type JobState } from '../../domain/job-state.js';
import { poolOf } from '../../domain/resources.js';
import { stageShape } from '../../domain/stage-shape.js';
import type { StageState } from '../../domain/stage-state.js';
import { canTransition } from '../../domain/transition-table.js';
import type { Database, JobsTable, StagesTable } from '../schema.js';
import type { Idempotency } from '../store.js';
import { recordJobStateChange } from './sync-job-state.js';
import type { TxContext } from './tx-context.js';

/**
 * Bound parameters one statement may carry: SQLite's default since 3.32 (the SQLite that
 * better-sqlite3 12 bundles is built with SQLITE_MAX_VARIABLE_NUMBER=32766); PostgreSQL allows
 * 65,535. Multi-row inserts are cut to stay under it.
 */
const MAX_PARAMETERS = 32_766;

/** A job's row as submitted. */
export function jobRow(id: string, def: JobDefinition, source: string | null, state: JobState, now: number): Omit<JobsTable, 'rerun_of' | 'rerun_from'> {
  return {
    id,
    name: def.name,
    team: def.team,
    priority: def.priority,
    labels: JSON.stringify(def.labels),
    state,
    definition: JSON.stringify(def),
    source,
    failure_reason: null,
    cancel_requested_at: null,
    created_at: now,
    updated_at: now,
    finished_at: null,
  };
}

/** A new job's stage rows: the one place a stage row is built. */
export function stageRows(jobId: string, def: JobDefinition, now: number) {
  return def.stages.map((s, position) => {
    const state: StageState = initialStageState(s.needs);
    return {
      id: newId('stg', now),
      job_id: jobId,
      name: s.name,
      position,
      pool: poolOf(s.resources),
      shape: stageShape(s.resources, s.placement, { team: def.team, preemptible: s.preemptible, timeoutSeconds: s.timeoutSeconds }),
      preemptible: s.preemptible ? 1 : 0,
      preempted_at: null,
      state,
      priority: def.priority,
      definition: JSON.stringify(s),
      attempts_used: 0,
      lost_used: 0,
      token: 0,
      current_attempt_id: null,
      output_attempt_id: null,
      ready_since: state === 'ready' ? now : null,
      not_before: null,
      queue_timeout_ms: s.queueTimeoutSeconds ? s.queueTimeoutSeconds * 1000 : null,
      pending_reason: null,
      end_reason: null,
      created_at: now,
      updated_at: now,
      finished_at: null,
    } satisfies Omit<StagesTable, 'parked_at' | 'reused_from' | 'reused_run_ms' | 'reused_gpus' | 'reused_gpu_milli' | 'outputs_released_at'>;
  });
}

/** Inserts rows in as few statements as the parameter limit allows (every row has the same columns). */
export async function insertRows<T extends keyof Database>(tx: TxContext, table: T, rows: readonly object[]): Promise<void> {
  if (rows.length === 0) return;
  const perInsert = Math.max(1, Math.floor(MAX_PARAMETERS / Object.keys(rows[0]!).length));
  for (let i = 0; i < rows.length; i += perInsert) {
    await tx.db
      .insertInto(table)
      .values(rows.slice(i, i + perInsert) as never)
      .execute();
  }
}

/**
 * Submits jobs in one transaction, all or none, and returns their ids in the order given. Each job
 * gets what a single submit writes: its row, its stages (roots ready, the rest pending), a
 * `job:submitted` event, and its move out of `submitted` (its event); each pool
 * with a ready stage is told once for the whole batch. Rows go in as multi-row inserts, so the
 * cost is a few statements per thousand jobs rather than several per job.
 */
export async function jobSubmitBatch(
  tx: TxContext,
  p: { definitions: readonly JobDefinition[]; sources?: readonly (string | null)[]; idempotency?: Idempotency },
): Promise<string[]> {
  const now = tx.now;
  if (p.idempotency) await idempotencyCheck(tx, p.idempotency);
  const teams = [...new Set(p.definitions.map((d) => d.team))];
  for (let i = 0; i < teams.length; i += 1000) {
    await tx.db
      .insertInto('teams')
      .values(teams.slice(i, i + 1000).map((name) => ({ name, weight: 1, created_at: now })))
      .onConflict((oc) => oc.column('name').doNothing())
      .execute();
  }
  const ids: string[] = [];
  const jobs: ReturnType<typeof jobRow>[] = [];
  const stages: ReturnType<typeof stageRows> = [];
  const readyPools = new Set<string>();
  for (const [i, def] of p.definitions.entries()) {
    const jobId = newId('job', now);
    const rows = stageRows(jobId, def, now);
    // What syncJobState would make of the new stages, written directly instead of in a second
    // statement per job; the transition is checked the same way.
    const state = deriveJobState(
      rows.map((r) => r.state),
      false,
    );
    if (state !== 'submitted' && !canTransition(jobTransitions, 'submitted', state)) {
      throw new Error(`internal: a new job cannot move from submitted to ${state}`);
    }
    ids.push(jobId);
    jobs.push(jobRow(jobId, def, p.sources?.[i] ?? null, state, now));
    for (const r of rows) {
      stages.push(r);
      if (r.state === 'ready') readyPools.add(r.pool);
    }
    await tx.event({
      type: 'job:submitted',
      jobId,
      message: `job ${def.name} submitted by team ${def.team} with ${def.stages.length} stage(s)`,
      data: { stages: def.stages.length, priority: def.priority },
    });
    if (state !== 'submitted') await recordJobStateChange(tx, jobId, 'submitted', state);
  }
  await insertRows(tx, 'jobs', jobs);
  await insertRows(tx, 'stages', stages);
  for (const pool of readyPools) await tx.publish('pool:ready', { pool });
  if (p.idempotency) await idempotencyRecord(tx, p.idempotency, ids);
  return ids;
}

/**
 * A request's Idempotency-Key, looked up in the same transaction as what it makes: a retry that
 * arrives after the commit finds it; one that races the first waits for the writer and then finds
 * it. Seen with the same request: AlreadySubmitted (with the jobs it made); with another: ConflictError.
 */
export async function idempotencyCheck(tx: TxContext, idempotency: Idempotency): Promise<void> {
  // Only the caller's own scope: the same key from another team (or admin token) is another key.
  const seen = await tx.db
    .selectFrom('idempotency_keys')
    .selectAll()
    .where('scope', '=', idempotency.scope)
    .where('key', '=', idempotency.key)
    .executeTakeFirst();
  if (!seen) return;
  if (seen.request_hash !== idempotency.requestHash) {
    throw new ConflictError(`Idempotency-Key "${idempotency.key}" was already used for a different request; use a new key for a new request`);
  }
  throw new AlreadySubmitted(idempotency.key, JSON.parse(seen.job_ids) as string[]);
}

/** Records the key with the jobs its request made, in their transaction. */
export async function idempotencyRecord(tx: TxContext, idempotency: Idempotency, jobIds: readonly string[]): Promise<void> {
  await tx.db
    .insertInto('idempotency_keys')
    .values({ scope: idempotency.scope, key: idempotency.key, request_hash: idempotency.requestHash, job_ids: JSON.stringify(jobIds), created_at: tx.now })
    .execute();
}

/** One job: a batch of one, so that both write exactly the same rows, events and messages. */
export async function jobSubmit(tx: TxContext, p: { definition: JobDefinition; source: string | null; idempotency?: Idempotency }): Promise<string> {
  const [id] = await jobSubmitBatch(tx, { definitions: [p.definition], sources: [p.source], idempotency: p.idempotency });
  return id!;
}
