import { CompiledQuery, type Kysely, Migrator, sql } from 'kysely';
import type { JobState } from '../../domain/job-state.js';
import { BATCH_TOPIC, topicMessage, type TopicMessage } from '../../domain/topic.js';
import { NotFoundError, NotLeaderError, StoreBusyError } from '../../domain/errors.js';
import { backoffDelay, EQUAL_JITTER } from '../../lib/backoff-delay.js';
import { sleep } from '../../lib/sleep.js';
import type { Plan, QueueShape } from '../../scheduler/snapshot.js';
import { migrationProvider } from '../migrations.js';
import type { AuditEntry, OutboxMessage } from '../records.js';
import type { Database } from '../schema.js';
import type {
  AttemptCompletion,
  LeaderLease,
  MachineRegistration,
  MachineSchedulingChange,
  MachineSeen,
  PlacementSource,
  ReapResult,
  Store,
  PlanApplyResult,
} from '../store.js';
import type { StoreCapabilities } from '../store-capabilities.js';
import * as attempts from './attempt-verbs.js';
import * as jobs from './job-verbs.js';
import * as rerun from './rerun-verbs.js';
import * as outputs from './output-verbs.js';
import * as artifacts from './artifact-verbs.js';
import * as machines from './machine-verbs.js';
import * as operator from './machine-scheduling-verbs.js';
import * as scheduler from './scheduler-verbs.js';
import { planChunks } from './plan-chunks.js';
import { clusterAndUsage, clusterView, keptCluster } from './cluster-view.js';
import { machineReport } from './report-verbs.js';
import { attemptsHeld } from './attempts-held.js';
import * as tokens from './token-verbs.js';
import * as audit from './audit-verbs.js';
import * as teams from './team-verbs.js';
import * as autoscale from './autoscale-verbs.js';
import * as autoscaleRead from './autoscale-rows.js';
import { toEvent } from './row-mappers.js';
import type { Usage } from './machine-usage.js';
import { machineHeartbeatRead } from './heartbeat-read.js';
import { heartbeatRenewal } from './heartbeat-renewal.js';
import { markHandled, PLACEMENT_HINTS, SavepointsNeeded, TransactionAborted, TxContext, type Trx } from './tx-context.js';
import { RowsChanged } from './rows-changed.js';
import { GroupCommit, type PassBeforeCommit } from './group-commit.js';
import { isSchemaGone, isTransientDbError } from './transient-db-error.js';
import { type DirectConnection, execute, prepared } from './prepared-query.js';
import { startOnPlacementAsked } from './start-on-placement.js';
import { PassReads } from './pass-reads.js';
import { reapInBatches, takeTurns } from './reap-batches.js';
import { SerializableNeeded } from './loss-read-committed.js';
import { StartsNeedSerializable } from './starts-read-committed.js';
import { loseMany } from './lose-many.js';

const leaderHolds = prepared<[holder: string, term: number, now: number]>()((db, [holder, term, now]) =>
  db.selectFrom('leader').select('term').where('name', '=', 'control').where('holder', '=', holder).where('term', '=', term).where('expires_at', '>=', now),
);

/** The holder's lease extended while it holds it (leaderClaim): the term and the new expiry, or nothing when it no longer holds it. */
const leaderRenew = prepared<[expiresAt: number, holder: string, now: number]>()((db, [expiresAt, holder, now]) =>
  db
    .updateTable('leader')
    .set({ expires_at: expiresAt })
    .where('name', '=', 'control')
    .where('holder', '=', holder)
    .where('expires_at', '>=', now)
    .returning(['term', 'expires_at']),
);

/** The loop's placing chunks read by index (planApply). */
const noSeqScan = CompiledQuery.raw('set local enable_seqscan = off');

/** How many times a transaction refused for a conflict is tried before the caller is told the database is busy. */
const MAX_TRIES = 20;
/** Rows of the liveness flush a transaction writes on SQLite before the event loop turns (machinesSeenInTurns). */
export const SEEN_ROWS_A_TURN = 1024;

/** The wait before a conflicting transaction's next try: short (the conflict is over as soon as the
 *  other commits), growing, under 50 ms, jittered so that the losers of one conflict do not meet again. */
const CONFLICT_BACKOFF = { baseMs: 2, maxMs: 50, jitter: EQUAL_JITTER } as const;

/**
 * The store, written once over Kysely for every SQL adapter. An adapter supplies a configured
 * Kysely instance and its capability flags; everything else is shared, and so is the
 * conformance suite that proves it.
 */
export class KyselyStore implements Store {
  private listeners: ((messages: OutboxMessage[]) => void)[] = [];
  /** What each shape asks for: a shape's request never changes (see readyShapes). */
  private readonly shapes = new Map<string, QueueShape>();
  /** The machines' rows as last read, re-read when the cluster's version moves (cluster-view.ts). */
  private readonly cluster = keptCluster();

  /** One writer (SQLite): calls that wait share the next transaction's commit. */
  private readonly group: GroupCommit | null;

  constructor(
    readonly db: Kysely<Database>,
    readonly capabilities: StoreCapabilities,
    /** PostgreSQL: the schema the tables live in, where the migrator keeps its own tables too. */
    private readonly schema?: string,
    /** SQLite: its one connection, which a group's transaction uses directly while it holds it. */
    direct?: DirectConnection,
  ) {
    this.group = capabilities.singleWriter
      ? new GroupCommit(
          db,
          (written) => this.listeners.forEach((l) => l(written)),
          (trx, now, optimistic) => this.context(trx, now, optimistic),
          undefined,
          direct ?? null,
        )
      : null;
  }

  async migrate(): Promise<string[]> {
    const migrator = new Migrator({
      db: this.db,
      provider: migrationProvider(this.capabilities),
      // Named, or the migrator takes another schema's migration tables (any in the database) for its own.
      ...(this.schema ? { migrationTableSchema: this.schema } : {}),
    });
    let { error, results } = await migrator.migrateToLatest();
    // Kysely's migrator looks for its table through PostgreSQL's catalog of every schema, asking
    // each one's privileges by name: a schema another client drops meanwhile (another store's, a
    // test's) fails that read with 3F000 "schema … does not exist", or 42P01 "relation … does not
    // exist" for one of its tables. Nothing was migrated: run again.
    for (let tries = 1; error && this.capabilities.dialect === 'postgres' && isSchemaGone(error) && tries < 5; tries++) {
      await sleep(20 * tries);
      ({ error, results } = await migrator.migrateToLatest());
    }
    // Kysely types the failure as unknown; one that is not an Error is shown as it prints.
    // eslint-disable-next-line @typescript-eslint/no-base-to-string
    if (error) throw error instanceof Error ? error : new Error(String(error));
    return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
  }

  async close(): Promise<void> {
    await this.db.destroy();
    await this.control?.destroy();
    await this.leaseDb?.destroy();
  }

  /**
   * PostgreSQL: connections of the leader's own (docs/replicas.md, "The leader's lane"). The lease's
   * renewal, every transaction of the leader's loops (asLeader: the scheduler's passes, the
   * reaper) and the liveness loop's writes (machinesSeen: what the reaper judges by) run on them, so they never wait in the pool's queue behind the agents' requests: with
   * 5,000 agents on two replicas that queue held heartbeats for seconds, the lease's renewals
   * waited in it past the lease, and leadership went back and forth (37 times in a run), its loops
   * stopped each time: nothing placed, no machine found lost.
   */
  private control: Kysely<Database> | null = null;
  useControlPool(db: Kysely<Database>): void {
    this.control = db;
  }
  /** This store on the leader's connections, where it has them. */
  private lane(): KyselyStore {
    return this.on(this.control);
  }

  /**
   * PostgreSQL: the lease's own connection (docs/replicas.md, "The leader's lane"). The lane's
   * three connections carry the passes, both reapers' batches and every replica's liveness
   * writes; once a fleet of 10,000 flaps those are large and many, and a claim queued behind them
   * past the lease's 5 s would hand leadership to the other replica (the lane held by five liveness
   * flushes kept a renewal 1.3 s: leader-lane.test.ts). Not what the measured churn was (no claim
   * came late there: the replicas' clocks disagreed, synced-clock.ts), but a claim is one short
   * transaction every TTL / 3, and a connection of its own never queues it.
   */
  private leaseDb: Kysely<Database> | null = null;
  useLeaseConnection(db: Kysely<Database>): void {
    this.leaseDb = db;
  }
  private leaseLane(): KyselyStore {
    return this.on(this.leaseDb ?? this.control);
  }
  private on(db: Kysely<Database> | null): KyselyStore {
    if (!db) return this;
    const s = Object.create(this) as KyselyStore;
    Object.defineProperty(s, 'db', { value: db });
    return s;
  }

  onOutbox(listener: (messages: OutboxMessage[]) => void): void {
    this.listeners.push(listener);
  }

  /** Outbox messages kept in memory, not in rows (keepOutboxInMemory). */
  private memoryOutbox = false;

  keepOutboxInMemory(): void {
    this.memoryOutbox = true;
  }

  /** A transaction's context, with this store's settings; `optimistic`: savepoints only when needed (group commit's first run). */
  private context(trx: Trx, now: number, optimistic = false, rowsChanged: RowsChanged | null = null): TxContext {
    return new TxContext(trx, now, !this.capabilities.singleWriter, this.memoryOutbox, optimistic, rowsChanged, this.capabilities.setBasedWrites === true);
  }

  /** Several writers' transactions run their parts without savepoints first (tx()); those run again with them. */
  carefulRuns = 0;

  /** With several writers: the clock a transaction's time is read from when it begins (useClock). */
  private clock: { now(): number } | null = null;

  useClock(clock: { now(): number }): void {
    this.clock = clock;
  }

  /** The time a transaction begun now acts at: not before `now`, nor before the clock (tx() says why). */
  private actsAt(now: number): number {
    return this.clock ? Math.max(now, this.clock.now()) : now;
  }

  /** Set on the stores asLeader() makes: the term every transaction of theirs must still hold. */
  private termOf: (() => { holder: string; term: number } | null) | null = null;

  /**
   * `place: false`: with several writers, no pass before this transaction's commit (its messages
   * wake the loop instead): a submit's transaction is large, and a pass in it, reading the cluster
   * while many agents' reports and heartbeats write it, conflicted with them until it gave up (a
   * fleet of 200 agents on PostgreSQL: the batch answered 503 after 20 tries).
   * `maxTries`: fewer tries than MAX_TRIES before StoreBusyError, for a caller that has a better
   * next step than trying the same transaction again (the reapers split their batch: reap-batches.ts).
   */
  private async tx<T>(
    now: number,
    body: (tx: TxContext) => Promise<T>,
    opts: { place?: boolean; readCommitted?: boolean; lossReadCommitted?: boolean; maxTries?: number } = {},
  ): Promise<T> {
    const termOf = this.termOf;
    const fn = termOf
      ? async (tx: TxContext) => {
          // In the transaction, before anything is written: a takeover that commits first makes
          // this read fail to find the term; one that commits later conflicts with it and reruns.
          const t = termOf();
          if (!t || !(await leaderHolds.first(tx.db, t.holder, t.term, tx.now))) throw new NotLeaderError(t?.holder ?? '(none)', t?.term ?? 0);
          return body(tx);
        }
      : body;
    if (this.group) return this.group.run(now, fn);
    // Several writers (PostgreSQL): every transaction is SERIALIZABLE, and one the database
    // refuses for a conflict with a concurrent one is run again whole, from a fresh context
    // (docs/store-contract.md). So no verb has to reason about which interleavings it survives.
    //
    // Parts that may fail alone (a report's items) run first without savepoints, two statements
    // each saved: a part that fails having written nothing is undone by dropping what it
    // collected; one that wrote, or that the database refused (which aborts the transaction on
    // PostgreSQL), sends the whole transaction round again with savepoints (docs/throughput.md).
    let careful = false;
    for (let tries = 1; ; tries++) {
      let ctx: TxContext | undefined;
      let placed: PassBeforeCommit = { written: [], handled: false };
      const counter = careful ? null : new RowsChanged();
      // A transaction acts at the time it runs (each try its own), not the time its caller read the
      // clock (a request may wait for a connection, or run again after a conflict): so the times
      // written follow the order of the commits, and a cancel that committed after a start is never
      // stamped before it. Without a clock (tests), `now` as given.
      const at = this.actsAt(now);
      // Before the transaction's snapshot: what a handled hint is compared with (OutboxMessage.handledSince).
      const began = performance.now();
      try {
        const out = await this.db
          .transaction()
          .setIsolationLevel(opts.readCommitted === true || opts.lossReadCommitted === true ? 'read committed' : 'serializable')
          .execute(async (trx) => {
            const t = counter ? trx.withPlugin(counter) : trx;
            ctx = this.context(t, at, counter !== null, counter);
            ctx.lossReadCommitted = opts.lossReadCommitted === true;
            const result = await fn(ctx);
            // Room made (stages readied, capacity freed): placed before this commit, in it, as with
            // one writer (docs/scheduling.md, "When a pass runs"), rather than by the scheduler
            // loop's own transaction after it, which the next report then conflicted with.
            const gate = this.passBeforeCommit;
            if (gate.place && !gate.running && opts.place !== false && ctx.hints(PLACEMENT_HINTS)) {
              gate.running = true;
              try {
                placed = await gate.place(t, at, counter !== null, counter, ctx);
              } finally {
                gate.running = false;
              }
            }
            // The last statement before the commit: its commit may go with it (TxContext.flush).
            await ctx.flush(true);
            return result;
          });
        const all = placed.written.length ? [...(ctx?.written ?? []), ...placed.written] : (ctx?.written ?? []);
        // A pass that ran to its end read what this transaction wrote: its hints wake no loop pass
        // (docs/scheduling.md, "Which hints wake the loop"); one skipped, failed or with `more` left does not say so.
        const written = placed.handled ? markHandled(all, began) : all;
        if (written.length) for (const l of this.listeners) l(written);
        return out;
      } catch (err) {
        if (err instanceof SavepointsNeeded && !careful) {
          careful = true;
          this.carefulRuns++;
          tries--;
          continue;
        }
        if (!isTransientDbError(err)) throw err;
        if (tries >= (opts.maxTries ?? MAX_TRIES)) throw new StoreBusyError(tries, err);
        await sleep(backoffDelay(CONFLICT_BACKOFF, tries, Math.random()));
      }
    }
  }

  async installationId(): Promise<string> {
    return (await this.db.selectFrom('installation').select('id').executeTakeFirstOrThrow()).id;
  }
  async databaseNow(): Promise<number> {
    if (this.capabilities.dialect === 'sqlite') return Date.now(); // the file is on this host: one clock already
    // On the lease's connection: queued behind the requests, the reading's round trip took seconds
    // and SyncedClock had to leave it out (or, before it did, took it, seconds wrong).
    const r = await sql<{ now: number }>`select (extract(epoch from clock_timestamp()) * 1000)::bigint as now`.execute(this.leaseLane().db);
    return Number(r.rows[0]!.now);
  }
  async leaderClaim(p: { holder: string; now: number; ttlMs: number }): Promise<LeaderLease> {
    // The holder's renewal first, READ COMMITTED: one write guarded on the holder and its lease not
    // yet run out, checked again on the row's newest version. Every transaction of the leader's
    // (the reapers' batches, the passes) reads this row for its term; a SERIALIZABLE renewal wrote it
    // every few seconds, so each of them that overlapped one depended on it, and one more dependency
    // made it the pivot PostgreSQL refused (docs/failure-detection.md, "Which writers the reapers
    // meet"). A renewal changes neither holder nor term: a term check that read the lease before it
    // decided what it would have decided after. A takeover stays SERIALIZABLE below: one committed
    // first leaves this guard unmet; one that read the row before this renewal committed is refused
    // when it writes it (a concurrent update) and, run again, finds the lease renewed.
    //
    // `waitedMs`: from the call to its first statement (a connection, BEGIN), for the slow claim's log.
    const called = performance.now();
    let waitedMs: number | undefined;
    const waited = () => (waitedMs ??= performance.now() - called);
    if (!this.capabilities.singleWriter) {
      const renewed = await this.leaseLane().tx(
        p.now,
        (tx) => {
          waited();
          return leaderRenew.first(tx.db, tx.now + p.ttlMs, p.holder, tx.now);
        },
        { readCommitted: true },
      );
      if (renewed) return { holder: p.holder, term: Number(renewed.term), expiresAt: Number(renewed.expires_at), leader: true, waitedMs: waited() };
    }
    const out = await this.leaseLane().tx(p.now, async (tx): Promise<LeaderLease> => {
      waited();
      const row = await tx.db.selectFrom('leader').selectAll().where('name', '=', 'control').executeTakeFirstOrThrow();
      const mine = row.holder === p.holder && Number(row.expires_at) >= tx.now;
      if (!mine && Number(row.expires_at) >= tx.now) return { holder: row.holder, term: Number(row.term), expiresAt: Number(row.expires_at), leader: false };
      // Renewing keeps the term; taking over (expired, or resigned) starts the next one.
      const term = mine ? Number(row.term) : Number(row.term) + 1;
      const expiresAt = tx.now + p.ttlMs;
      await tx.db
        .updateTable('leader')
        .set({ holder: p.holder, term, expires_at: expiresAt })
        .where('name', '=', 'control')
        .where('term', '=', row.term)
        .execute();
      if (!mine)
        await tx.event({ type: 'leader:elected', message: `${p.holder} is the leader (term ${term})`, data: { holder: p.holder, term, previous: row.holder } });
      return { holder: p.holder, term, expiresAt, leader: true };
    });
    return { ...out, waitedMs: waited() };
  }
  async leaderResign(p: { holder: string; term: number }): Promise<void> {
    await this.db
      .updateTable('leader')
      .set({ expires_at: 0 })
      .where('name', '=', 'control')
      .where('holder', '=', p.holder)
      .where('term', '=', p.term)
      .execute();
  }
  asLeader(term: () => { holder: string; term: number } | null): Store {
    // Shares everything (connection, listeners, group commit) through the prototype; only the term differs.
    const fenced = Object.create(this.lane()) as KyselyStore;
    fenced.termOf = term;
    return fenced;
  }

  async jobSubmit(p: Parameters<Store['jobSubmit']>[0]) {
    return this.tx(
      p.now,
      async (tx) => {
        const id = await jobs.jobSubmit(tx, p);
        tx.audit(p.audit, { target: id });
        return (await jobs.jobGet(tx.db, id, { fresh: true }))!;
      },
      { place: false },
    );
  }
  jobSubmitBatch(p: Parameters<Store['jobSubmitBatch']>[0]) {
    return this.tx(
      p.now,
      async (tx) => {
        const ids = await jobs.jobSubmitBatch(tx, p);
        tx.audit(p.audit, { target: ids.length === 1 ? ids[0]! : `${ids.length} jobs: ${ids[0]} … ${ids.at(-1)}` });
        return ids;
      },
      { place: false },
    );
  }
  jobGet(p: { jobId: string }) {
    return jobs.jobGet(this.db, p.jobId);
  }
  async jobTeam(p: { jobId: string }) {
    return (await this.db.selectFrom('jobs').select('team').where('id', '=', p.jobId).executeTakeFirst())?.team ?? null;
  }
  jobList(p: { state?: JobState; team?: string; name?: string; limit: number; before?: string }) {
    return jobs.jobList(this.db, p);
  }
  jobDelete(p: { jobId: string; now: number; audit?: AuditEntry }) {
    return this.tx(p.now, async (tx) => {
      const r = await jobs.jobDelete(tx, p.jobId);
      if (r) tx.audit(p.audit, { target: p.jobId, result: `ok: deleted with ${r.attempts.length} attempt(s)` });
      return r;
    });
  }
  jobRerun(p: Parameters<Store['jobRerun']>[0]) {
    return this.tx(p.now, async (tx) => {
      const r = await rerun.jobRerun(tx, p);
      if (r?.job) {
        const reused = r.plan.reused.map((x) => x.stage).join(', ') || 'none';
        tx.audit(p.audit, {
          target: p.jobId,
          result: `ok: rerun as ${r.job.id}${r.canceled ? ' (canceled first)' : ''}; reused ${reused}; runs ${r.plan.rerun.map((x) => x.stage).join(', ')}`,
        });
      }
      return r;
    });
  }
  async jobCancel(p: { jobId: string; now: number; reason: string; audit?: AuditEntry }) {
    const out = await this.tx(p.now, async (tx) => {
      const r = await jobs.jobCancel(tx, p);
      if (r) tx.audit(p.audit, { target: p.jobId, result: r.changed ? 'ok' : 'ok: already ended' });
      return r;
    });
    if (!out) throw new NotFoundError('job', p.jobId);
    return out;
  }
  stageLogs(p: Parameters<Store['stageLogs']>[0]) {
    return jobs.stageLogs(this.db, p);
  }
  async eventsList(p: Parameters<Store['eventsList']>[0]) {
    let q = this.db
      .selectFrom('events')
      .selectAll('events')
      .orderBy('events.seq', p.newestFirst ? 'desc' : 'asc')
      .limit(p.limit);
    // `jobId: null` reads the (job_id, seq) index's NULL range: the machines' and the autoscaler's events, not every job's.
    if (p.jobId === null) q = q.where('events.job_id', 'is', null);
    else if (p.jobId) q = q.where('events.job_id', '=', p.jobId);
    if (p.noun !== undefined) q = q.where('events.type', 'like', `${p.noun}:%`);
    if (p.afterSeq !== undefined) q = q.where('events.seq', '>', p.afterSeq);
    if (p.team !== undefined) {
      const team = p.team;
      q = q.where((eb) =>
        eb.or([
          eb.exists(eb.selectFrom('jobs').select('jobs.id').whereRef('jobs.id', '=', 'events.job_id').where('jobs.team', '=', team)),
          ...(p.withMachines ? [eb('events.job_id', 'is', null)] : []),
        ]),
      );
    }
    if (p.pool !== undefined) {
      const pool = p.pool;
      q = q.where((eb) =>
        eb.exists(
          eb
            .selectFrom('stages')
            .select('stages.id')
            .whereRef('stages.job_id', '=', 'events.job_id')
            .whereRef('stages.name', '=', 'events.stage_name')
            .where('stages.pool', '=', pool),
        ),
      );
    }
    return (await q.execute()).map(toEvent);
  }
  async eventsHead() {
    const r = await this.db
      .selectFrom('events')
      .select((eb) => eb.fn.max('seq').as('seq'))
      .executeTakeFirst();
    return Number(r?.seq ?? 0);
  }

  clusterView() {
    return clusterView(this.db, this.cluster);
  }
  clusterFacts() {
    return clusterView(this.db, this.cluster, false);
  }
  readyShapes(_p: { now: number }) {
    return scheduler.readyShapes(this.db, this.shapes);
  }
  queueHeads(p: { now: number; shapes: { shape: string; limit: number }[] }) {
    return scheduler.queueHeads(this.db, p, this.shapes);
  }
  async schedulerSnapshot(p: { now: number; limitPerShape: number }) {
    const cluster = await this.clusterView();
    const shapes = await this.readyShapes(p);
    const queue = await this.queueHeads({ now: p.now, shapes: shapes.map((s) => ({ shape: s.shape, limit: p.limitPerShape })) });
    return { clusterVersion: cluster.version, machines: cluster.machines, queue };
  }
  queueStats() {
    return scheduler.queueStats(this.db);
  }
  stageQueuePosition(p: { stageId: string }) {
    return scheduler.stageQueuePosition(this.db, p.stageId);
  }
  async planApply(p: { plan: Plan; now: number; leaseMs: number; jitter?: number }): Promise<PlanApplyResult> {
    if (this.group) return this.tx(p.now, (tx) => scheduler.planApply(tx, p));
    // Several writers (PostgreSQL): the plan in chunks, each its own transaction (plan-chunks.ts
    // says why), each checking the term and re-checking its placements against the rows as they
    // are then. A chunk refused runs again alone; one that fails for good (the leader deposed, the
    // database busy) fails the call, the chunks before it committed and the rest left to the next
    // pass, as a pass that failed leaves its whole plan. The caller is not told what the committed
    // chunks placed (the pass's count and its `more` miss them; each chunk's own messages still
    // went out with its commit): the next pass reads the queue anew either way.
    const out: PlanApplyResult = { applied: [], skipped: [] };
    for (const plan of planChunks(p.plan)) {
      const r = await this.tx(p.now, async (tx) => {
        // By index only: a sequential scan under SERIALIZABLE locks its whole relation, and the
        // planner chose one for a chunk's sixteen machines, stages and jobs on tables of a
        // thousand rows (placing-chunks.test.ts reads pg_locks for it). `local`: this transaction's.
        await execute(tx.db, noSeqScan);
        return scheduler.planApply(tx, { ...p, plan });
      });
      out.applied.push(...r.applied);
      out.skipped.push(...r.skipped);
      if (r.preempted?.length) out.preempted = [...(out.preempted ?? []), ...r.preempted];
    }
    return out;
  }
  schedulerTeams(p: { usage: boolean }) {
    return teams.schedulerTeams(this.db, p.usage);
  }
  preemptionView() {
    return teams.preemptionView(this.db);
  }
  heldUntil(p: { machineIds: readonly string[]; now: number }) {
    return teams.heldUntil(this.db, p);
  }
  teamList() {
    return teams.teamList(this.db);
  }
  teamGet(p: { name: string }) {
    return teams.teamGet(this.db, p.name);
  }
  teamPut(p: Parameters<Store['teamPut']>[0]) {
    return this.tx(p.now, async (tx) => {
      const r = await teams.teamPut(tx, p);
      tx.audit(p.audit, { target: p.name, result: r.created ? 'ok: created' : r.changed ? 'ok: changed' : 'ok: unchanged' });
      return r;
    });
  }
  placementSource(): PlacementSource {
    if (!this.capabilities.multiStatementReads) return this;
    // The five reads in a transaction of their own, one round trip (pass-reads.ts); the rest as the store's.
    const reads = new PassReads(this.db, this.shapes, true);
    return {
      clusterView: async () => (await clusterAndUsage(this.db, this.cluster, true, reads.take('cluster'))).view,
      readyShapes: () => reads.readyShapes(),
      queueHeads: (p) => this.queueHeads(p),
      schedulerTeams: (p) => reads.schedulerTeams(p, () => this.schedulerTeams(p)),
      preemptionView: () => reads.preemptionView(() => this.preemptionView()),
      heldUntil: (p) => this.heldUntil(p),
      planApply: (p) => {
        reads.drop();
        return this.planApply(p);
      },
      autoscaleHeldStages: (p) => this.autoscaleHeldStages(p),
      autoscaleHoldClear: (p) => {
        reads.drop();
        return this.autoscaleHoldClear(p);
      },
    };
  }
  placeBeforeCommit(pass: (source: PlacementSource) => Promise<boolean | void>, onError: (err: unknown) => void): boolean {
    if (this.group) this.group.beforeCommit = (trx, now, optimistic) => this.placeIn(trx, now, optimistic, null, null, pass, onError);
    else this.passBeforeCommit.place = (trx, now, optimistic, rowsChanged, outer) => this.placeIn(trx, now, optimistic, rowsChanged, outer, pass, onError);
    return true;
  }

  /**
   * Several writers (PostgreSQL): the pass placeBeforeCommit installed, run by tx() before the
   * commit of a transaction that readied stages or freed capacity; `running` while one runs in
   * this process. One at a time: a transaction that finds another's pass running leaves its room
   * to the next pass (its hints still wake the scheduler loop), rather than a second pass reading
   * the same queue and claiming the same stages, one of the two to conflict and run again.
   * An object, so that the stores asLeader() makes share it.
   */
  private readonly passBeforeCommit: {
    place: ((trx: Trx, now: number, optimistic: boolean, rowsChanged: RowsChanged | null, outer: TxContext) => Promise<PassBeforeCommit>) | null;
    running: boolean;
  } = { place: null, running: false };

  /**
   * The pass before a commit (placeBeforeCommit), in that transaction, under a savepoint of its
   * own; answers the outbox messages it wrote and whether it ran to its end (`handled`: it
   * resolved `true`; one that failed did not). With `outer` (several writers: the transaction's
   * own context), what the pass's writes collected (events, messages) is written with the
   * transaction's at its flush, once the pass has succeeded: one lock and one insert each for
   * both, not a second round of them (docs/throughput.md, "A pass's reads in one round trip").
   */
  private async placeIn(
    trx: Trx,
    now: number,
    optimistic: boolean,
    rowsChanged: RowsChanged | null,
    outer: TxContext | null,
    pass: (source: PlacementSource) => Promise<boolean | void>,
    onError: (err: unknown) => void,
  ): Promise<PassBeforeCommit> {
    // A context of its own, for the savepoint and for what the pass writes besides its rows.
    const ctx = this.context(trx, now, optimistic, rowsChanged);
    const asked = startOnPlacementAsked(trx);
    const written: OutboxMessage[] = [];
    /** The pass's write contexts whose events and messages the transaction's flush writes (`outer`). */
    const deferred: TxContext[] = [];
    // A write of the pass's: a context of its own in this transaction, its messages kept with the pass's.
    const write = async <T>(now: number, f: (c: TxContext) => Promise<T>): Promise<T> => {
      const c = this.context(trx, now, optimistic, rowsChanged);
      const r = await f(c);
      if (outer) {
        deferred.push(c);
        return r;
      }
      await c.flush();
      written.push(...c.written);
      return r;
    };
    /**
     * What attempts hold, by machine, as the pass's last cluster view read it, until the pass
     * writes: its plan is applied in this same transaction, which would read the same rows again
     * (planApply's `held`). Each write drops it, so a view read after one (a hold's plan, then the
     * full pass) is read anew.
     */
    let held: ReadonlyMap<string, Usage> | undefined;
    // Where the driver answers several statements at once (PostgreSQL), the pass's reads without
    // arguments go in one round trip, each part taken once until the pass writes (pass-reads.ts).
    const reads = this.capabilities.multiStatementReads ? new PassReads(trx, this.shapes) : null;
    const source: PlacementSource = {
      clusterView: async () => {
        const r = await clusterAndUsage(trx, this.cluster, true, reads?.take('cluster'));
        held = r.usage;
        return r.view;
      },
      readyShapes: () => (reads ? reads.readyShapes() : scheduler.readyShapes(trx, this.shapes)),
      queueHeads: (p) => scheduler.queueHeads(trx, p, this.shapes),
      schedulerTeams: (p) => {
        const read = () => teams.schedulerTeams(trx, p.usage);
        return reads ? reads.schedulerTeams(p, read) : read();
      },
      preemptionView: () => {
        const read = () => teams.preemptionView(trx);
        return reads ? reads.preemptionView(read) : read();
      },
      heldUntil: (p) => teams.heldUntil(trx, p),
      // Where a report in this transaction asked, what is placed on its machine starts at once.
      planApply: (p) => {
        const read = held;
        held = undefined;
        reads?.drop();
        return write(p.now, async (c) => {
          const r = await scheduler.planApply(c, { ...p, ...(read ? { held: read } : {}), ...(asked ? { startOn: asked.machines() } : {}) });
          for (const a of r.applied) if (a.state === 'running') asked?.started(a.machineId, a.id);
          return r;
        });
      },
      autoscaleHeldStages: (p) => autoscaleRead.autoscaleHeldStages(trx, p),
      autoscaleHoldClear: (p) => {
        held = undefined;
        reads?.drop();
        return write(p.now, (c) => autoscale.autoscaleHoldClear(c, p));
      },
    };
    try {
      const ran = await ctx.savepoint(() => pass(source));
      // Only now: a pass that failed is undone with its savepoint, and what it collected dropped.
      if (outer) for (const c of deferred) outer.absorb(c);
      return { written, handled: ran === true };
    } catch (err) {
      // The whole transaction is gone: its members fail with it, as they would have.
      if (err instanceof TransactionAborted) throw err;
      asked?.undo();
      onError(err);
      return { written: [], handled: false };
    }
  }

  // --- the autoscaler's (issue 30): writes through tx(), so asLeader() fences them like every other ---
  autoscaleRows(p: { active?: boolean; pool?: string }) {
    return autoscaleRead.autoscaleRows(this.db, p);
  }
  autoscaleStart(p: Parameters<Store['autoscaleStart']>[0]) {
    return this.tx(p.now, (tx) => autoscale.autoscaleStart(tx, p));
  }
  autoscaleRequested(p: Parameters<Store['autoscaleRequested']>[0]) {
    return this.tx(p.now, (tx) => autoscale.autoscaleRequested(tx, p));
  }
  autoscaleHold(p: Parameters<Store['autoscaleHold']>[0]) {
    return this.tx(p.now, (tx) => autoscale.autoscaleHold(tx, p));
  }
  autoscaleHeldStages(p: { now: number }) {
    return autoscaleRead.autoscaleHeldStages(this.db, p);
  }
  autoscaleHoldClear(p: { name: string; now: number }) {
    return this.tx(p.now, (tx) => autoscale.autoscaleHoldClear(tx, p));
  }
  autoscaleDrain(p: { name: string; reason: string; now: number }) {
    return this.tx(p.now, (tx) => autoscale.autoscaleDrain(tx, p));
  }
  autoscaleKeep(p: { name: string; reason: string; now: number }) {
    return this.tx(p.now, (tx) => autoscale.autoscaleKeep(tx, p));
  }
  autoscaleRelease(p: { name: string; reason: string; now: number }) {
    return this.tx(p.now, (tx) => autoscale.autoscaleRelease(tx, p));
  }
  autoscaleFail(p: { name: string; reason: string; now: number }) {
    return this.tx(p.now, (tx) => autoscale.autoscaleFail(tx, p));
  }
  autoscaleStopped(p: { name: string; now: number }) {
    return this.tx(p.now, (tx) => autoscale.autoscaleStopped(tx, p));
  }
  async autoscaleWaitsPut(p: Parameters<Store['autoscaleWaitsPut']>[0]) {
    await this.tx(p.now, (tx) => autoscale.autoscaleWaitsPut(tx, p));
  }
  autoscaleWaitOf(p: { stageId: string }) {
    return autoscaleRead.autoscaleWaitOf(this.db, p);
  }

  machineRegister(p: MachineRegistration & { now: number; credential?: { id: string; hash: string }; audit?: AuditEntry }) {
    return this.tx(p.now, async (tx) => {
      const { credential } = p;
      // A name never seen joins without a read (machineJoinNew): no live agent to take over, no credential to revoke.
      const joined = await machines.machineJoinNew(tx, p);
      if (!joined && credential) await tokens.refuseLiveTakeover(tx, p.name);
      const m = joined ?? (await machines.machineRegister(tx, p));
      if (credential) await tokens.issueMachineCredential(tx, { machineId: m.id, machineName: m.name, ...credential, revoke: !joined });
      tx.audit(p.audit, { target: m.name, result: credential ? `ok: joined as ${m.id}, credential ${credential.id}` : `ok: ${m.id}` });
      return m;
    });
  }

  tokenCreate(p: Parameters<Store['tokenCreate']>[0]) {
    return this.tx(p.now, async (tx) => {
      const t = await tokens.tokenCreate(tx, p);
      tx.audit(p.audit, { target: t.id, result: `ok: ${t.kind} token${t.team ? ` for team ${t.team}` : ''}` });
      return t;
    });
  }
  tokenByHash(p: { hash: string }) {
    return tokens.tokenByHash(this.db, p.hash);
  }
  tokenList(p: { includeRevoked?: boolean }) {
    return tokens.tokenList(this.db, p);
  }
  tokenRevoke(p: { id: string; now: number; audit?: AuditEntry }) {
    return this.tx(p.now, async (tx) => {
      const r = await tokens.tokenRevoke(tx, p);
      if (r) tx.audit(p.audit, { target: p.id, result: r.changed ? 'ok' : 'ok: already revoked' });
      return r;
    });
  }
  tokensPrune(p: { before: number; limit: number }) {
    return tokens.tokensPrune(this.db, p);
  }
  auditRecord(p: AuditEntry & { result: string; now: number; foldWithinMs?: number }) {
    return this.tx(p.now, (tx) => audit.auditRecord(tx, p));
  }
  auditList(p: { afterSeq?: number; since?: number; limit: number }) {
    return audit.auditList(this.db, p);
  }
  auditPrune(p: { before: number; limit: number }) {
    return audit.auditPrune(this.db, p);
  }
  async machineHeartbeat(p: Parameters<Store['machineHeartbeat']>[0]) {
    // A heartbeat that writes nothing: one read, no transaction (heartbeat-read.ts); at the time a
    // transaction begun now would act at (tx()).
    if (this.capabilities.readsOutsideTransactions === true) {
      const read = await machineHeartbeatRead(this.db, this.actsAt(p.now), p);
      if (read && !read.renew) return read.answer;
      // Several writers: a heartbeat that writes only its liveness (its row's time, its leases) does
      // so READ COMMITTED, guarded writes that neither refuse nor are refused (heartbeat-renewal.ts).
      // One writer has no conflicts to spare: its transaction as before.
      if (read?.renew && !this.capabilities.singleWriter) {
        const renew = read.renew;
        // False where something moved since the read (the machine judged, an attempt no longer
        // running): the read's answer would then be wrong, so the heartbeat's transaction below
        // answers instead (what was renewed meanwhile stays: a lease of an attempt still running).
        if (await this.tx(p.now, (tx) => heartbeatRenewal(tx, renew), { readCommitted: true })) return read.answer;
      }
    }
    const out = await this.tx(p.now, (tx) => machines.machineHeartbeat(tx, p));
    if (!out) throw new NotFoundError('machine', p.machineId);
    return out;
  }
  machinesSeen(p: Parameters<Store['machinesSeen']>[0]) {
    if (p.seen.length === 0) return Promise.resolve(0);
    // On the leader's lane too (useControlPool): the reaper runs there, never queued, so the
    // writes that keep machines alive must not wait in the requests' queue either, or a live
    // machine whose arrivals sat in it would be judged by rows seconds old (a 200-agent fleet on
    // PostgreSQL lost a live member so: test/fleet/fleet.test.ts).
    //
    // READ COMMITTED, alone of the store's transactions: its one statement a thousand rows is a
    // guarded write that reads nothing else (`last_heartbeat_at < seen.at`), and PostgreSQL re-checks
    // that guard on the row's newest version when another transaction changed it meanwhile. Under
    // SERIALIZABLE, any one of its thousand rows written by another transaction (a heartbeat's own
    // write, the reaper's, a registration) refused the whole statement, which ran again whole: with
    // 3,000 agents on PostgreSQL × 2 it gave up after 20 tries 40 times in a run (StoreBusyError),
    // rows went stale, heartbeats wrote them one by one and machines went suspect and back
    // (docs/throughput.md, "A fleet of agents"). What the serializable readers of those rows decide
    // stays safe: the reaper's write is guarded by the very heartbeat time it read
    // (machinesReap: `last_heartbeat_at = ?`), so a flush committed after its read refuses it
    // (a concurrent update) and it runs again on the new time.
    if (!this.capabilities.singleWriter) return this.lane().tx(p.now, (tx) => machines.machinesSeen(tx, p.seen), { readCommitted: true });
    return this.machinesSeenInTurns(p.seen, p.now);
  }

  /**
   * One writer in process (SQLite, synchronous): a transaction of SEEN_ROWS_A_TURN rows at a time,
   * the event loop let turn between them. The flush at 10,000 machines is some 4,000 rows every
   * 1.6 s; written in one transaction it held the server's loop 19 ms at the median (a scratch
   * timing, 4,000 rows) and 30–60 ms under load, and every heartbeat that arrived meanwhile waited it out
   * (docs/throughput.md, "The liveness flush in turns"). Each row's write stands alone (its own
   * guarded `last_heartbeat_at < at`), so the rows need not commit together; the caller keeps the
   * whole batch in view until the last part lands (HeartbeatLiveness.heardAt), so the reaper never
   * judges a machine of a part not yet written by its old row.
   */
  private async machinesSeenInTurns(seen: readonly MachineSeen[], now: number): Promise<number> {
    let moved = 0;
    for (let i = 0; i < seen.length; i += SEEN_ROWS_A_TURN) {
      if (i > 0) await new Promise<void>((resolve) => setImmediate(resolve));
      const part = seen.slice(i, i + SEEN_ROWS_A_TURN);
      moved += await this.lane().tx(now, (tx) => machines.machinesSeen(tx, part), { readCommitted: true });
    }
    return moved;
  }
  machinesHeartbeating(p: { now: number }) {
    return machines.machinesHeartbeating(this.db, p.now);
  }
  machineKillList(p: { machineId: string; running: { attemptId: string; token: number }[] }) {
    return machines.killList(this.db, p.machineId, p.running);
  }
  machineList() {
    return machines.machineList(this.db);
  }

  attemptsHeld() {
    return attemptsHeld(this.db);
  }
  machineGet(p: { machineId: string }) {
    return machines.machineGet(this.db, p.machineId);
  }
  machineFind(p: { machine: string }) {
    return operator.machineFind(this.db, p.machine);
  }
  machineCordon(p: { machine: string; now: number; audit?: AuditEntry }) {
    return this.operatorTx(p, operator.machineCordon);
  }
  machineUncordon(p: { machine: string; now: number; audit?: AuditEntry }) {
    return this.operatorTx(p, operator.machineUncordon);
  }
  machineDrain(p: { machine: string; now: number; stopRunning?: boolean; jitter?: number; audit?: AuditEntry }) {
    return this.operatorTx(p, (tx, q) => operator.machineDrain(tx, { ...q, stopRunning: p.stopRunning ?? false, jitter: p.jitter ?? 0.5 }));
  }
  machineRemove(p: { machine: string; now: number; audit?: AuditEntry }) {
    return this.operatorTx(p, operator.machineRemove);
  }
  private async operatorTx(
    p: { machine: string; now: number; audit?: AuditEntry },
    verb: (tx: TxContext, p: { machine: string }) => Promise<MachineSchedulingChange | null>,
  ) {
    const out = await this.tx(p.now, async (tx) => {
      const r = await verb(tx, p);
      if (r)
        tx.audit(p.audit, {
          target: r.machine.name,
          result: `ok: ${r.changed ? `now ${r.machine.scheduling}` : `already ${r.machine.scheduling}`}${r.stopped ? `, ${r.stopped} stopped` : ''}`,
        });
      return r;
    });
    if (!out) throw new NotFoundError('machine', p.machine);
    return out;
  }
  machineAssignments(p: Parameters<Store['machineAssignments']>[0]) {
    return machines.machineAssignments(this.db, p.machineId, p.exclude, p.outputs, p.started);
  }

  async machineReport(p: Parameters<Store['machineReport']>[0]) {
    const body = (readCommitted: boolean) => async (tx: TxContext) => {
      const r = await machineReport(tx, { ...p, readCommitted });
      // Filled by the pass before the commit, read once it is committed.
      return r && { r, asked: p.startOnPlacement ? startOnPlacementAsked(tx.db) : undefined };
    };
    const out = await this.reportTx(p, body);
    if (!out) throw new NotFoundError('machine', p.machineId);
    return out.asked ? { ...out.r, startedOnPlacement: out.asked.startedOn(p.machineId) } : out.r;
  }

  /**
   * A report's transaction. With several writers (PostgreSQL), a report of starts alone runs READ
   * COMMITTED first, with no pass before its commit (a start frees no room): each of its writes is
   * guarded on its own row, and it can no longer be the pivot another report made of it
   * (starts-read-committed.ts). One with anything else found in it throws StartsNeedSerializable
   * having written nothing, and runs SERIALIZABLE at once, as every report did before; one with an
   * outcome or a pid runs SERIALIZABLE without the try.
   */
  private async reportTx<T>(p: Parameters<Store['machineReport']>[0], body: (readCommitted: boolean) => (tx: TxContext) => Promise<T>): Promise<T> {
    if (this.capabilities.singleWriter || p.completed.length > 0 || p.started.length === 0 || p.startOnPlacement || p.started.some((s) => s.pid !== null))
      return this.tx(p.now, body(false));
    try {
      return await this.tx(p.now, body(true), { place: false, readCommitted: true });
    } catch (err) {
      if (!(err instanceof StartsNeedSerializable)) throw err;
      this.startsSerializable++;
      return this.tx(p.now, body(false));
    }
  }
  /** Reports of starts that ran again SERIALIZABLE after their READ COMMITTED try found an item it could not take (reportTx). */
  startsSerializable = 0;

  attemptStart(p: Parameters<Store['attemptStart']>[0]) {
    return this.tx(p.now, (tx) => attempts.attemptStart(tx, p));
  }
  attemptComplete(p: AttemptCompletion & { now: number; jitter: number; machineId?: string }) {
    return this.tx(p.now, (tx) => attempts.attemptComplete(tx, p));
  }
  attemptLogAppend(p: Parameters<Store['attemptLogAppend']>[0]) {
    return this.tx(p.now, (tx) => attempts.attemptLogAppend(tx, p));
  }
  outputUploadRoom(p: Parameters<Store['outputUploadRoom']>[0]) {
    return attempts.outputUploadRoom(this.db, p);
  }
  attemptGet(p: { attemptId: string }) {
    return attempts.attemptGet(this.db, p.attemptId);
  }
  async outputUploaded(p: Parameters<Store['outputUploaded']>[0]) {
    await this.tx(p.now, (tx) => attempts.outputUploaded(tx, p));
  }
  outputUploads(p: { attemptIds: readonly string[] }) {
    return outputs.uploadsOf(this.db, p.attemptIds);
  }
  committedBlob(p: { attemptId: string; path: string }) {
    return outputs.committedBlob(this.db, p.attemptId, p.path);
  }
  machineReadsOutput(p: { machineId: string; attemptId: string }) {
    return outputs.machineReadsOutput(this.db, p.machineId, p.attemptId);
  }
  artifactsCollect(p: Parameters<Store['artifactsCollect']>[0]) {
    return this.tx(p.now, async (tx) => {
      const plan = await artifacts.artifactsCollect(tx, { maxBytes: p.maxBytes, dryRun: p.dryRun, limit: p.limit ?? 1000 });
      const freed = plan.collect.reduce((t, c) => t + c.size, 0);
      tx.audit(p.audit, {
        target: null,
        result: `ok${p.dryRun ? ' (dry run)' : ''}: ${plan.collect.length} blob(s), ${freed} bytes; ${plan.release.length} stage(s) released`,
      });
      return plan;
    });
  }
  async artifactsKeep(p: { blobs: readonly { blob: string; size: number }[]; now: number }) {
    if (p.blobs.length) await this.tx(p.now, (tx) => artifacts.artifactsKeep(tx, p.blobs));
  }
  artifactBlobsKnown(p: { keys: readonly string[] }) {
    return artifacts.artifactBlobsKnown(this.db, p.keys);
  }

  /**
   * Silent machines read outside a transaction, then judged REAP_BATCH to a transaction, each with
   * machinesReap's own guarded write (machine-verbs.ts, silentMachines; docs/failure-detection.md,
   * "A mass loss"). A batch the database keeps refusing is split (reapInBatches): a conflict with
   * one machine's writer holds back only that machine, and only until the next pass.
   */
  async machinesReap(p: Parameters<Store['machinesReap']>[0]) {
    // No pass before the commit of a batch of several (reapInBatches): a batch readies up to a
    // hundred stages, and a pass placing them in its transaction read the cluster and locked the
    // machines it chose, which the fleet's heartbeats write; the batch was refused until it gave up
    // (PostgreSQL × 2, 5,000 agents, 500 lost: the first seen lost after 31 s). Its messages wake
    // the scheduler loop instead.
    let lostDueAt: number | undefined;
    const r = await this.reapPass(
      async () => {
        const read = await machines.silentMachines(this.db, p);
        lostDueAt = read.lostDueAt;
        return read.silent;
      },
      (tx, batch) => machines.machinesReap(tx, batch, p),
      p.now,
    );
    return lostDueAt === undefined ? r : { ...r, lostDueAt };
  }
  /**
   * Overdue attempts read outside a transaction, then lost REAP_BATCH to a transaction, each write
   * guarded on the lease or acknowledgement still being overdue (attempt-verbs.ts, overdueAttempts).
   */
  attemptsReap(p: Parameters<Store['attemptsReap']>[0]) {
    return this.reapPass(
      () => attempts.overdueAttempts(this.db, p),
      async (tx, batch) => ({
        machines: [],
        lostAttempts: await loseMany(
          tx,
          batch.map((o) => attempts.overdueLoss(o, { ackTimeoutMs: p.ackTimeoutMs, now: tx.now })),
          p.jitter,
        ),
      }),
      p.now,
      // From the end of the list: the machine reaper takes the same attempts from its start (reapInBatches).
      { fromEnd: true },
    );
  }
  /** The reapers' batches, one at a time (takeTurns): shared by every view of this store (asLeader, lane), which inherit it. */
  private readonly reapTurn = takeTurns();
  private async reapPass<T>(
    read: () => Promise<T[]>,
    judge: (tx: TxContext, batch: readonly T[]) => Promise<ReapResult>,
    now: number,
    order: { fromEnd?: boolean } = {},
  ): Promise<ReapResult> {
    return reapInBatches(await read(), (batch, o) => this.reapTurn(() => this.lossTx(now, (tx) => judge(tx, batch), o)), order);
  }
  /**
   * A reaper's batch. With several writers (PostgreSQL) it runs READ COMMITTED first, where
   * PostgreSQL takes no predicate locks for it and checks none against its own: it can no longer be
   * the pivot the reports' passes made of it, refused, split and waited for (docs/failure-detection.md,
   * "A loss batch READ COMMITTED"). Every write of the batch is guarded on its own row, which
   * PostgreSQL checks again on the row's newest version; the advancer's decision is guarded by its
   * job's row, locked (with the attempts' rows, neither waited for) before the stages are read,
   * where the lost stage is its job's one active stage (lose-many.ts, loss-read-committed.ts). No pass before its commit, even for one item (a pass
   * needs SERIALIZABLE reads): its messages wake the scheduler loop. A batch with a loss no row
   * lock can guard throws SerializableNeeded having written nothing, and runs at once as before:
   * SERIALIZABLE, a batch of one placing before its commit.
   */
  private async lossTx<T>(now: number, body: (tx: TxContext) => Promise<T>, o: { place: boolean; maxTries?: number }): Promise<T> {
    if (this.capabilities.singleWriter) return this.tx(now, body, o);
    try {
      return await this.tx(now, body, { ...o, place: false, lossReadCommitted: true });
    } catch (err) {
      if (!(err instanceof SerializableNeeded)) throw err;
      this.lossesSerializable++;
      return this.tx(now, body, o);
    }
  }
  /** Loss batches that ran again SERIALIZABLE after their READ COMMITTED try found a loss it could not guard (lossTx). */
  lossesSerializable = 0;

  stagesPastQueueTimeout(p: { now: number; limit: number }) {
    return attempts.stagesPastQueueTimeout(this.db, p);
  }
  stageQueueTimeout(p: { stageId: string; reason: string; now: number }) {
    return this.tx(p.now, (tx) => attempts.stageQueueTimeout(tx, p));
  }

  jobsRepair(p: { now: number; staleAfterMs: number; limit: number; after?: string | null; scan?: number }) {
    return this.tx(p.now, (tx) => jobs.jobsRepair(tx, p));
  }

  async outboxPending(p: { limit: number; createdBefore?: number }): Promise<OutboxMessage[]> {
    let q = this.db.selectFrom('outbox').selectAll().where('published_at', 'is', null);
    if (p.createdBefore !== undefined) q = q.where('created_at', '<', p.createdBefore);
    const rows = await q.orderBy('id').limit(p.limit).execute();
    // Rows only TxContext.flush wrote: a topic with its payload, or (BATCH_TOPIC) a list of them,
    // read back as one message each, in their order (`limit` counts rows).
    return rows.flatMap((r) => {
      const id = Number(r.id);
      const createdAt = Number(r.created_at);
      const payload: unknown = JSON.parse(r.payload);
      if (r.topic !== BATCH_TOPIC) return [{ id, topic: r.topic, payload, createdAt } as OutboxMessage];
      return (payload as TopicMessage[]).map((m, part) => ({ id, part, ...topicMessage(m), createdAt }));
    });
  }
  jobsExpire(p: { finishedBefore: number; limit: number; now?: number }) {
    return this.tx(p.now ?? p.finishedBefore, (tx) => jobs.jobsExpire(tx, p));
  }
  async idempotencyPrune(p: { before: number }): Promise<number> {
    const r = await this.db.deleteFrom('idempotency_keys').where('created_at', '<', p.before).executeTakeFirst();
    return Number(r.numDeletedRows);
  }
  async outboxPrune(p: { before: number }): Promise<number> {
    const r = await this.db.deleteFrom('outbox').where('published_at', 'is not', null).where('published_at', '<', p.before).executeTakeFirst();
    return Number(r.numDeletedRows);
  }
  async outboxMarkPublished(p: { ids: number[]; now: number }): Promise<void> {
    if (p.ids.length === 0) return;
    await this.db.updateTable('outbox').set({ published_at: p.now }).where('id', 'in', p.ids).execute();
  }
}
