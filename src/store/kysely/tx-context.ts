import { CompiledQuery, type Kysely, type Transaction } from 'kysely';
import { BATCH_TOPIC, Topic, type TopicMessage, type TopicPayloads } from '../../domain/topic.js';
import type { AuditEntry, OutboxMessage } from '../records.js';
import type { Database } from '../schema.js';
import { directChanges, directTransactionOpen, execute, prepared, preparedBySize } from './prepared-query.js';
import { isDatabaseError, isTransientDbError } from './transient-db-error.js';
import { errorText } from '../../lib/error-text.js';

export type Db = Kysely<Database>;
export type Trx = Transaction<Database>;

export interface EventInput {
  type: string;
  message: string;
  jobId?: string | null;
  stageName?: string | null;
  attemptId?: string | null;
  machineId?: string | null;
  data?: Record<string, unknown>;
}

/** The transaction as a whole is gone (rolled back by the database); nothing in it may go on. */
export class TransactionAborted extends Error {
  constructor(
    override readonly cause: unknown,
    readonly undo: unknown,
  ) {
    super(`transaction aborted: ${errorText(cause)}`);
    this.name = 'TransactionAborted';
  }
}

/**
 * A part of the transaction run optimistically (no savepoint) failed after it had changed rows,
 * which only a rollback can undo: the whole transaction is rolled back and run again with real
 * savepoints (group-commit.ts). Nothing of it was committed or answered. A TransactionAborted, so
 * that every place that lets a dropped transaction through lets this through too.
 */
export class SavepointsNeeded extends TransactionAborted {
  constructor(cause: unknown) {
    super(cause, null);
    this.name = 'SavepointsNeeded';
  }
}

/**
 * What one store transaction carries besides the connection: the time it acts at, and the two
 * append-only side effects every state change has: an event row, and outbox rows that are
 * published to the bus after commit (the transactional outbox: a crash between commit and
 * publish loses nothing, since the rows are still there for the relay's next pass).
 *
 * Both are collected in memory and written by `flush()` just before the commit, a few multi-row
 * inserts instead of one statement each: a transaction that places a hundred stages writes its
 * hundred events at once. `savepoint()` scopes a part of the transaction that may fail on its own
 * (one item of an agent's batched report) so that its writes, events and messages all go.
 */
export class TxContext {
  /** `at`: the time of a context this one took the events of (absorb); else this one's. */
  private events: (EventInput & { readonly at?: number })[] = [];
  private audits: (AuditEntry & { result: string; foldKey: string | null })[] = [];
  private messages: { message: TopicMessage; key: string }[] = [];
  /** The keys of `messages`, so that a batch submit's thousands of messages dedupe in linear time. */
  private depth = 0;
  private messageKeys = new Set<string>();
  /** The outbox rows this transaction wrote, with their ids; set by flush(). */
  written: OutboxMessage[] = [];
  /**
   * A reaper's loss batch run READ COMMITTED on PostgreSQL (loss-read-committed.ts): its losses
   * lock their jobs' and attempts' rows (nowait) before reading their stages, and a loss that needs
   * a serializable read, or a row another transaction holds, throws SerializableNeeded. Set by the store's tx() for that transaction only.
   */
  lossReadCommitted = false;

  constructor(
    readonly db: Trx,
    readonly now: number,
    /** Several writers at once (PostgreSQL): append rows in commit order (see flush). */
    readonly concurrent = false,
    /** Outbox messages go to the bus from memory after the commit, with no row (Store.keepOutboxInMemory). */
    private readonly memoryOutbox = false,
    /**
     * Savepoints only when needed (SQLite's group commit, and every first run on PostgreSQL: docs/throughput.md): `savepoint()` runs
     * its part with none and undoes a failed part that changed no row by dropping what it collected;
     * one that changed rows throws SavepointsNeeded, and the group runs again with this off.
     */
    readonly optimistic = false,
    /**
     * Where the optimistic transaction is not on SQLite's direct connection (PostgreSQL): the rows
     * its statements changed so far (RowsChanged), which is how a failed part tells whether it wrote.
     */
    private readonly rowsChanged: { changes(): number } | null = null,
    /** Many rows' writes in one statement (StoreCapabilities.setBasedWrites: a statement is a round trip). */
    readonly setBased = false,
  ) {}

  async event(e: EventInput): Promise<void> {
    this.events.push(e);
  }

  /**
   * The audit row of the change this transaction makes for a person (docs/security.md), written
   * with it or not at all. `undefined`: the change was not asked for through the API (a test, a loop).
   */
  audit(entry: AuditEntry | undefined, over: { target?: string | null; result?: string; foldKey?: string } = {}): void {
    if (!entry) return;
    this.audits.push({ ...entry, ...(over.target !== undefined ? { target: over.target } : {}), result: over.result ?? 'ok', foldKey: over.foldKey ?? null });
  }

  /** Messages are hints (see bus.ts): the same topic and payload twice in one transaction is sent once. */
  async publish<T extends Topic>(topic: T, payload: TopicPayloads[T]): Promise<void> {
    const key = topic + JSON.stringify(payload);
    if (this.messageKeys.has(key)) return;
    this.messageKeys.add(key);
    this.messages.push({ message: { topic, payload } as TopicMessage, key });
  }

  /**
   * Takes what `other`, a context of the same transaction, collected and has not written, to
   * write it with its own at this context's flush: one lock, one insert of events and one of
   * outbox rows for both (a pass before a commit, kysely-store.ts placeIn). Its events keep their
   * time; its messages are deduplicated with these, as one context's are, and their rows take
   * this context's time (`created_at`: the two differ by the pass's few milliseconds).
   */
  absorb(other: TxContext): void {
    for (const e of other.events) this.events.push(e.at === undefined ? { ...e, at: other.now } : e);
    for (const a of other.audits) this.audits.push(a);
    for (const m of other.messages) {
      if (this.messageKeys.has(m.key)) continue;
      this.messageKeys.add(m.key);
      this.messages.push(m);
    }
    other.events = [];
    other.audits = [];
    other.messages = [];
    other.messageKeys.clear();
  }

  /** Whether this transaction has published any of these topics so far. */
  hints(topics: ReadonlySet<Topic>): boolean {
    return this.messages.some((m) => topics.has(m.message.topic));
  }

  /**
   * Runs `fn` under a savepoint: if it throws, everything it wrote (rows, events, messages) is
   * undone and the error rethrown; the rest of the transaction goes on.
   */
  async savepoint<T>(fn: () => Promise<T>): Promise<T> {
    if (this.optimistic) return this.withoutSavepoint(fn);
    // Named by depth: savepoints nest strictly (a group member's, then a report item's inside it),
    // and a name resolves to the innermost one, so a few fixed texts serve every transaction (a
    // name per savepoint would fill the statement cache with texts used once).
    const q = savepointQueries(++this.depth);
    const undoCollected = this.mark();
    try {
      await execute(this.db, q.savepoint);
      try {
        const out = await fn();
        await execute(this.db, q.release);
        return out;
      } catch (err) {
        // A conflict with concurrent transactions (PostgreSQL) dooms the whole transaction, not
        // this part: it goes up to be run again whole, rather than answered as this part's error.
        if (isTransientDbError(err)) throw new TransactionAborted(err, null);
        try {
          await execute(this.db, q.rollback);
          await execute(this.db, q.release);
        } catch (undo) {
          // Some errors (disk full, I/O) make SQLite roll the whole transaction back on its own:
          // the savepoint is gone, and going on would run later work outside any transaction.
          throw new TransactionAborted(err, undo);
        }
        undoCollected();
        throw err;
      }
    } finally {
      this.depth--;
    }
  }

  /**
   * `savepoint()` when optimistic: no statement before or after `fn`, only a look at how many rows
   * the connection has changed so far. If `fn` fails having changed none, undoing it is dropping
   * what it collected in memory; if it changed some, only a rollback of the whole transaction can.
   */
  private async withoutSavepoint<T>(fn: () => Promise<T>): Promise<T> {
    const undoCollected = this.mark();
    const before = this.changes();
    try {
      return await fn();
    } catch (err) {
      if (err instanceof TransactionAborted) throw err;
      if (this.rowsChanged) {
        // PostgreSQL: an error the database answered has aborted the whole transaction, written or
        // not; a conflict is run again whole as any, anything else again with savepoints.
        if (isTransientDbError(err)) throw new TransactionAborted(err, null);
        if (isDatabaseError(err) || this.changes() !== before) throw new SavepointsNeeded(err);
        undoCollected();
        throw err;
      }
      // Some errors (disk full, I/O) make SQLite roll the whole transaction back on its own: going
      // on would run later work outside any transaction, each statement committing alone.
      if (directTransactionOpen(this.db) !== true) throw new TransactionAborted(err, null);
      if (this.changes() !== before) throw new SavepointsNeeded(err);
      undoCollected();
      throw err;
    }
  }

  /** What this context has collected so far (events, audit rows, messages), and a way back to it. */
  private mark(): () => void {
    const events = this.events.length;
    const audits = this.audits.length;
    const messages = this.messages.length;
    return () => {
      this.events.length = events;
      this.audits.length = audits;
      for (const m of this.messages.splice(messages)) this.messageKeys.delete(m.key);
    };
  }

  /**
   * A count that grows with every row changed on this connection, kept by the direct connection as
   * its statements run (statement-cache.ts). Optimistic runs happen only on a transaction open on
   * it (group-commit.ts), which is also what lets a failed part tell a dropped transaction.
   */
  private changes(): number {
    if (this.rowsChanged) return this.rowsChanged.changes();
    const n = directChanges(this.db);
    if (n === null) throw new Error('internal: an optimistic savepoint outside a transaction open on the direct connection');
    return n;
  }

  /**
   * Writes the collected events and outbox rows; called once, right before the commit. `last`: the
   * commit follows with no statement between (the store's tx()), so where the locking append is
   * the flush's only statement it is sent marked AND_COMMIT, and PostgreSQL's connection sends the
   * commit with it (postgres/append-and-commit.ts): the append lock is then held for no round trip.
   */
  async flush(last = false): Promise<void> {
    // One row for the transaction's messages (up to MESSAGES_PER_ROW in each), not one a message:
    // each row is written, marked published and pruned, and published to the bus on its own, so
    // a report's three messages cost one of each (docs/replicas.md, "The outbox and the relay").
    // A row of one message is written as before, one topic and its payload.
    const groups: TopicMessage[][] = [];
    if (this.memoryOutbox) {
      for (const m of this.messages) this.written.push({ id: nextMemoryId++, ...m.message, createdAt: this.now, stored: false });
    } else {
      for (let i = 0; i < this.messages.length; i += MESSAGES_PER_ROW) groups.push(this.messages.slice(i, i + MESSAGES_PER_ROW).map((m) => m.message));
    }
    this.messages = [];
    this.messageKeys.clear();
    // Readers page events and audit rows by `seq` ("everything after 41"), which is only safe if
    // no row with a smaller seq can still commit after a larger one did. With concurrent writers
    // a sequence hands out numbers in call order, not commit order, so the appends of concurrent
    // transactions take turns: the lock is held from here to the commit, a short tail of each
    // transaction (docs/store-contract.md). The first append takes it itself, in its plan, before
    // any of its rows takes a number, and carries the first part of both the events and the audit
    // rows: for nearly every transaction the tail under the lock is that one statement and the
    // commit, where it was a statement for the lock, one for each table, then the commit.
    const events = this.events.map((e) => [
      e.at ?? this.now,
      e.type,
      e.jobId ?? null,
      e.stageName ?? null,
      e.attemptId ?? null,
      e.machineId ?? null,
      e.message,
      JSON.stringify(e.data ?? {}),
    ]);
    const audits = this.audits.map((a) => ({
      at: this.now,
      token_id: a.tokenId,
      actor: a.actor,
      action: a.action,
      target: a.target,
      result: a.result,
      fold_key: a.foldKey,
    }));
    this.events = [];
    this.audits = [];
    let e = 0;
    let a = 0;
    let o = 0;
    if (this.concurrent && (events.length || audits.length)) {
      // The first outbox rows ride in the same statement (docs/replicas.md, "The outbox and the
      // relay"): with replicas, a report's row was a round trip of its own, the one statement a
      // transaction sent that one replica's (its outbox in memory) did not. Their ids need no
      // order (the relay reads whatever is unmarked), so being written under the lock costs
      // nothing: it is held to the commit either way.
      const firstGroups = groups.slice(0, ROWS_PER_INSERT);
      const firstEvents = events.slice(0, ROWS_PER_INSERT);
      const firstAudits = audits.slice(0, ROWS_PER_INSERT);
      const auditValues = firstAudits.flatMap((r) => AUDIT_COLUMNS.map((c) => r[c]));
      const outboxValues = firstGroups.flatMap((g) => this.outboxValues(g));
      // Nothing after this statement (each part fits in it, up to ROWS_PER_INSERT rows): its commit can go with it.
      const alone = last && groups.length <= ROWS_PER_INSERT && events.length <= ROWS_PER_INSERT && audits.length <= ROWS_PER_INSERT;
      const text = lockingAppend(firstEvents.length, firstAudits.length, firstGroups.length);
      const r = await execute<{ id: string | number }>(
        this.db,
        CompiledQuery.raw(alone ? text + AND_COMMIT : text, [...outboxValues, ...auditValues, ...firstEvents.flat()]),
      );
      if (firstGroups.length) this.outboxWritten(firstGroups, r.rows);
      e = firstEvents.length;
      a = firstAudits.length;
      o = firstGroups.length;
    }
    for (; o < groups.length; o += ROWS_PER_INSERT) {
      const part = groups.slice(o, o + ROWS_PER_INSERT);
      this.outboxWritten(part, (await insertOutbox(part.length).run(this.db, ...part.flatMap((g) => this.outboxValues(g)))).rows);
    }
    // Live event streams (GET /v1/events) read on when told: a wake-up, not a record, so it is
    // never stored (the event rows are the record; a stream that misses one reads on its timer).
    if (events.length) this.written.push({ id: nextMemoryId++, topic: Topic.eventsWritten, payload: {}, createdAt: this.now, stored: false });
    for (; e < events.length; e += ROWS_PER_INSERT) {
      const part = events.slice(e, e + ROWS_PER_INSERT);
      await insertEvents(part.length).run(this.db, ...part.flat());
    }
    for (; a < audits.length; a += ROWS_PER_INSERT) {
      const part = audits.slice(a, a + ROWS_PER_INSERT);
      await this.db.insertInto('audit').values(part).execute();
    }
  }

  /** An outbox row's values (topic, payload, created_at): one message as itself, several as a batch. */
  private outboxValues(g: TopicMessage[]): unknown[] {
    return g.length === 1 ? [g[0]!.topic, JSON.stringify(g[0]!.payload), this.now] : [BATCH_TOPIC, JSON.stringify(g), this.now];
  }

  /** The rows just inserted for `groups` (their ids, in the groups' order), as the messages the commit hands on. */
  private outboxWritten(groups: TopicMessage[][], rows: { id: string | number }[]): void {
    groups.forEach((g, j) => {
      const id = Number(rows[j]!.id);
      if (g.length === 1) this.written.push({ id, ...g[0]!, createdAt: this.now });
      else g.forEach((m, k) => this.written.push({ id, part: k, ...m, createdAt: this.now }));
    });
  }
}

/** The topics that say a pass could place something now: stages became ready, or room was freed. */
export const PLACEMENT_HINTS: ReadonlySet<Topic> = new Set([Topic.poolReady, Topic.capacityFreed]);

/**
 * A committed transaction's messages with their placement hints marked handled
 * (OutboxMessage.handled): the pass before the commit ran to its end, after the transaction's own
 * writes. The pass's own hints are marked with them: the only one it publishes is a preempted
 * stage's requeue, which waits out its grace (`notBefore`), so no pass right after could place it.
 */
export function markHandled(messages: OutboxMessage[], since: number): OutboxMessage[] {
  return messages.map((m) => (PLACEMENT_HINTS.has(m.topic) ? { ...m, handled: true, handledSince: since } : m));
}

/** Ids of messages kept in memory: this process's own, unique within it (the in-process bus de-duplicates by id). */
let nextMemoryId = 1;

/**
 * The end of a transaction's last statement's text when its commit may be sent with it
 * (postgres/append-and-commit.ts): a comment, so that a connection that does not fuse runs the text
 * as it is, and the commit after it as a statement of its own.
 */
export const AND_COMMIT = '\n-- and commit';

/** The key of the transaction-scoped advisory lock (PostgreSQL) that orders the appends to events and audit: arbitrary but fixed. */
const APPEND_LOCK_KEY = '7355608001';

/** Rows per multi-row insert: well under SQLite's limit on bound parameters (8 columns a row); one prepared text per count. */
const ROWS_PER_INSERT = 64;

/** Messages in one outbox row at most: a batch submit's thousands stay well under NATS's 1 MB a message. */
const MESSAGES_PER_ROW = 64;

const EVENT_COLUMNS = ['at', 'type', 'job_id', 'stage_name', 'attempt_id', 'machine_id', 'message', 'data'] as const;
const insertEvents = preparedBySize(ROWS_PER_INSERT, (n) =>
  prepared<unknown[]>()((db, v) =>
    db.insertInto('events').values(
      // `seq` is the table's own (autoincrement), which the schema's type does not say.
      Array.from({ length: n }, (_, i) => Object.fromEntries(EVENT_COLUMNS.map((c, j) => [c, v[i * EVENT_COLUMNS.length + j]]))) as never,
    ),
  ),
);
/**
 * PostgreSQL's first append of a transaction, which takes the append lock itself: the lock is an
 * uncorrelated subquery in a one-time filter, evaluated before the first row is produced and so
 * before any row's `seq` (its default, `nextval`) is taken. With both audit rows and events, the
 * audit insert is a `with` the events' one-time filter reads, so it runs, lock first, before any
 * event takes its number. With `outbox` rows, the statement also inserts them (a `with` of its
 * own, outside the lock's order: their ids need none) and answers their ids, in their order.
 * Parameters: the outbox rows' (topic, payload, created_at), the audit rows', then the events'.
 * Text per count of each, made once.
 */
const lockingTexts = new Map<string, string>();
export function lockingAppend(events: number, audits: number, outbox = 0): string {
  const key = `${events}:${audits}:${outbox}`;
  let text = lockingTexts.get(key);
  if (text) return text;
  const lock = `(select pg_advisory_xact_lock(${APPEND_LOCK_KEY})) is not null`;
  const rows = (types: readonly string[], n: number, from: number) =>
    Array.from({ length: n }, (_, i) => `(${types.map((t, j) => `$${from + i * types.length + j + 1}::${t}`).join(', ')})`).join(', ');
  const columns = (names: readonly string[]) => names.map((c) => `"${c}"`).join(', ');
  const auditFrom = outbox * OUTBOX_TYPES.length;
  const auditInsert = `insert into "audit" (${columns(AUDIT_COLUMNS)}) select * from (values ${rows(AUDIT_TYPES, audits, auditFrom)}) as v where ${lock}`;
  const eventsFrom = `select * from (values ${rows(EVENT_TYPES, events, auditFrom + audits * AUDIT_TYPES.length)}) as w`;
  const eventsInsert = (filter: string) => `insert into "events" (${columns(EVENT_COLUMNS)}) ${eventsFrom} where ${filter}`;
  // The parts as `with`s: a data-modifying `with` runs whether or not the statement reads it.
  const parts: string[] = [];
  if (outbox > 0) parts.push(`o as (insert into "outbox" ("topic", "payload", "created_at") values ${rows(OUTBOX_TYPES, outbox, 0)} returning "id")`);
  if (audits > 0) parts.push(`a as (${auditInsert}${events > 0 ? ' returning 1' : ''})`);
  if (events > 0) parts.push(`e as (${eventsInsert(audits > 0 ? '(select count(*) from a) >= 0' : lock)})`);
  if (outbox > 0) text = `with ${parts.join(', ')} select "id" from o order by "id"`;
  else if (events === 0) text = auditInsert;
  else if (audits === 0) text = eventsInsert(lock);
  else text = `with a as (${auditInsert} returning 1) ${eventsInsert('(select count(*) from a) >= 0')}`;
  lockingTexts.set(key, text);
  return text;
}
const OUTBOX_TYPES = ['text', 'text', 'bigint'] as const;
const EVENT_TYPES = ['bigint', 'text', 'text', 'text', 'text', 'text', 'text', 'text'] as const;
const AUDIT_COLUMNS = ['at', 'token_id', 'actor', 'action', 'target', 'result', 'fold_key'] as const;
const AUDIT_TYPES = ['bigint', 'text', 'text', 'text', 'text', 'text', 'text'] as const;
const insertOutbox = preparedBySize(ROWS_PER_INSERT, (n) =>
  prepared<unknown[]>()((db, v) =>
    db
      .insertInto('outbox')
      // `id` is the table's own (autoincrement), which the schema's type does not say.
      .values(Array.from({ length: n }, (_, i) => ({ topic: v[i * 3], payload: v[i * 3 + 1], created_at: v[i * 3 + 2], published_at: null })) as never)
      .returning('id'),
  ),
);

/**
 * The statements of a savepoint at one depth, compiled once: a report runs a pair for every item,
 * and building each from a template cost more than running it.
 */
const savepoints: { savepoint: CompiledQuery; release: CompiledQuery; rollback: CompiledQuery }[] = [];
function savepointQueries(depth: number) {
  return (savepoints[depth] ??= {
    savepoint: CompiledQuery.raw(`savepoint sp${depth}`),
    release: CompiledQuery.raw(`release sp${depth}`),
    rollback: CompiledQuery.raw(`rollback to sp${depth}`),
  });
}
