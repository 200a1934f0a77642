import { sql } from 'kysely';
import { KNOWN_AS_OF_MARGIN_MS } from '../../domain/known-as-of-margin.js';
import { activeAttemptStates, isAttemptActive } from '../../domain/attempt-state.js';
import { effectiveOutputLimits, type OutputPolicy } from '../../domain/output-limits.js';
import { preemptionGraceMs, stageLimits, type StageDefinition } from '../../domain/job-definition.js';
import { newId } from '../../domain/ids.js';
import { MAX_HEARTBEAT_PERIOD_MS, silenceGrowthMs } from '../../domain/heartbeat-period.js';
import { MachineHealth } from '../../domain/machine-health.js';
import { MachineScheduling } from '../../domain/machine-scheduling.js';
import type { Assignment, AttemptLimits, MachineContainment, MachineRecord, OutputFile } from '../records.js';
import type { HeardAt, HeartbeatResult, MachineRegistration, MachineSeen, ReapResult, Store } from '../store.js';
import { maskSecrets } from '../../domain/secret-env.js';
import { loseAttempt, secretsOf } from './attempt-verbs.js';
import { emptyUsage, machineUsage } from './machine-usage.js';
import { toMachine } from './row-mappers.js';
import { autoscaleJoined } from './autoscale-joined.js';
import { gangRendezvous } from './gang-rendezvous.js';
import { prepared, preparedBySize, preparedList } from './prepared-query.js';
import { loseMany } from './lose-many.js';
import { REAP_BATCH } from './reap-batches.js';
import { keysOf, v, valuesTable, writeRows } from './values-table.js';
import type { Db, Trx, TxContext } from './tx-context.js';

/**
 * A machine is known by its name: an agent restarted with the same name is the same machine. An
 * operator's cordon or drain survives that (it is the operator's to lift); a removed machine whose
 * agent registers again is back in service, as a new machine would be (its id, and so its
 * history, stay).
 */
export async function machineRegister(tx: TxContext, p: MachineRegistration): Promise<MachineRecord> {
  const existing = await tx.db.selectFrom('machines').selectAll().where('name', '=', p.name).executeTakeFirst();
  const fields = registrationFields(tx, p);
  let id: string;
  const revived = existing?.scheduling === MachineScheduling.removed;
  if (existing) {
    id = existing.id;
    const scheduling = revived ? MachineScheduling.eligible : existing.scheduling;
    await tx.db
      .updateTable('machines')
      .set({ ...fields, scheduling })
      .where('id', '=', id)
      .execute();
  } else {
    id = newId('m', tx.now);
    await tx.db
      .insertInto('machines')
      .values({ id, name: p.name, scheduling: MachineScheduling.eligible, registered_at: tx.now, ...fields })
      .execute();
  }
  await registered(tx, p, { id, returning: Boolean(existing), revived });
  return (await machineGet(tx.db, id))!;
}

/**
 * A machine joining under a name no row has: inserted, or null when the name is taken (then
 * machineRegister, which reads the row first). Nothing is read: the insert's own unique check
 * (which takes no predicate lock on PostgreSQL) decides, and the row comes back from the insert.
 * A fleet joining at once on PostgreSQL is why (docs/throughput.md, "Registering a fleet"): each
 * registration that read the name's index page, and its new id's (ids grow with time: the same
 * last page for all), and then inserted into both, formed read/write cycles with every other
 * registration in flight, and one of each pair was refused and run again; past a few thousand
 * machines, with the fleet's heartbeats beside them, some gave up after 20 tries (StoreBusyError).
 * The event, the autoscaler's hook and the wake-up are machineRegister's.
 */
export async function machineJoinNew(tx: TxContext, p: MachineRegistration): Promise<MachineRecord | null> {
  const id = newId('m', tx.now);
  const inserted = await tx.db
    .insertInto('machines')
    .values({ id, name: p.name, scheduling: MachineScheduling.eligible, registered_at: tx.now, ...registrationFields(tx, p) })
    .onConflict((oc) => oc.column('name').doNothing())
    .returningAll()
    // Whether any stage waits, read by the insert itself (no round trip of its own): see registered()'s `wake`.
    .returning((eb) =>
      eb
        .exists(
          eb
            .selectFrom('stages')
            .select(sql`1`.as('one'))
            .where('state', '=', 'ready'),
        )
        .as('stages_waiting'),
    )
    .executeTakeFirst();
  if (!inserted) return null;
  const { stages_waiting, ...row } = inserted;
  const { machineChanged } = await registered(tx, p, { id, returning: false, revived: false, wake: Boolean(stages_waiting) });
  // A new machine holds nothing; its row as inserted, unless the autoscaler's hook drained it (rare: read it again).
  return machineChanged ? (await machineGet(tx.db, id))! : toMachine(row, emptyUsage());
}

/** What a registration writes on the machine's row, new or known. */
function registrationFields(tx: TxContext, p: MachineRegistration) {
  return {
    cpu_millis: p.cpuMillis,
    memory_bytes: p.memoryBytes,
    gpus: JSON.stringify(p.gpus),
    gpus_declared: p.gpusDeclared ? 1 : 0,
    region: p.region,
    labels: JSON.stringify(p.labels),
    agent: JSON.stringify(p.agent),
    // Registering again says it anew: an agent restarted without containment (an older one) is no longer said to contain.
    containment: p.containment ? JSON.stringify(p.containment) : null,
    health: MachineHealth.ready,
    last_heartbeat_at: tx.now,
    // A registering agent starts at the configured period, until a heartbeat's answer says otherwise.
    heartbeat_ms: null,
    updated_at: tx.now,
  };
}

/** A registration's event, the autoscaler's hook (issue 30) and the wake-up: the same for a new machine and a known one. */
async function registered(
  tx: TxContext,
  p: MachineRegistration,
  o: { id: string; returning: boolean; revived: boolean; wake?: boolean },
): Promise<{ machineChanged: boolean }> {
  const { id, revived } = o;
  const gpuText = p.gpus.length ? `, ${p.gpus.length} ${p.gpus[0]!.type} GPU(s)${p.gpusDeclared ? ' (declared)' : ''}` : '';
  await tx.event({
    type: 'machine:registered',
    machineId: id,
    message: `machine ${p.name} registered${revived ? ' again after it was removed, back in service' : ''}: ${p.cpuMillis / 1000} CPU, ${Math.round(p.memoryBytes / 2 ** 20)} MiB${gpuText}${containmentText(p.containment)}`,
    data: { name: p.name, returning: o.returning, revived, containment: p.containment?.mechanism ?? null },
  });
  const joined = await autoscaleJoined(tx, { name: p.name, machineId: id });
  // `wake: false`: a new machine joins while no stage is ready, and a pass would read that and
  // place nothing. No message, so no pass: not before this commit on the leader, not in the
  // leader's loop woken over the bus, not the outbox row, its relay and its delivery to every
  // replica (a fleet joining on PostgreSQL × 2: each registration woke up to two passes that
  // found nothing; docs/throughput.md, "A fleet of agents"). A stage readied by a transaction
  // that commits meanwhile wakes a pass of its own; one that did not see this machine is followed by
  // the scheduler's interval pass (1 s), which does: a placement may wait that long, none is lost.
  if (o.wake !== false) await tx.publish('capacity:freed', { machineId: id });
  return joined;
}

/** What the agent said it enforces, for the registration's event: an operator following events sees a machine join uncontained. */
function containmentText(c: MachineContainment | null | undefined): string {
  if (!c) return '';
  const on = (
    [
      ['memory', c.memory],
      ['cpu', c.cpu],
      ['pids', c.pids],
      ['devices', c.devices],
    ] as const
  )
    .filter(([, yes]) => yes)
    .map(([what]) => what);
  return on.length ? `; enforces ${on.join(', ')} (${c.mechanism})` : `; enforces nothing (${c.mechanism}): its stages are not contained`;
}

export async function machineGet(db: Db, machineId: string): Promise<MachineRecord | null> {
  const row = await db.selectFrom('machines').selectAll().where('id', '=', machineId).executeTakeFirst();
  if (!row) return null;
  const usage = await machineUsage(db, [machineId]);
  return toMachine(row, usage.get(machineId) ?? emptyUsage());
}

/** Every machine not removed. */
export async function machineList(db: Db): Promise<MachineRecord[]> {
  const rows = await db.selectFrom('machines').selectAll().where('scheduling', '!=', MachineScheduling.removed).orderBy('name').execute();
  const usage = await machineUsage(db);
  return rows.map((r) => toMachine(r, usage.get(r.id) ?? emptyUsage()));
}

/** A heartbeat as the store is asked it (Store.machineHeartbeat), at its transaction's time. */
export type HeartbeatParams = Omit<Parameters<Store['machineHeartbeat']>[0], 'now'>;

/**
 * Whether the machine's row says it was seen recently enough that this heartbeat need not write
 * it: liveness kept in memory by the caller (machinesSeen) leaves the row alone while what it holds
 * is younger than livenessAfterMs; else, as before, within renewAfterMs of the last write.
 */
export function rowFresh(now: number, m: { last_heartbeat_at: number | string; heartbeat_ms: number | string | null }, p: HeartbeatParams): boolean {
  const grow = p.period ? silenceGrowthMs(m.heartbeat_ms === null ? null : Number(m.heartbeat_ms), p.period.heartbeatMs) : 0;
  const liveFor = p.livenessAfterMs !== undefined ? p.livenessAfterMs + grow : p.renewAfterMs;
  return liveFor !== undefined && now - Number(m.last_heartbeat_at) < liveFor;
}

/**
 * With the row fresh: whether the list calls for no write either (no attempt to release, none
 * missing), and no listed lease would be left older than renewAfterMs (after a re-registration,
 * say, which counts as a sign of life but renews no lease).
 */
export function writesNothing(now: number, unreported: Unreported, p: HeartbeatParams): boolean {
  const leasesFresh = unreported.oldestListedLease === null || unreported.oldestListedLease >= now + p.leaseMs - (p.renewAfterMs ?? 0);
  return unreported.release.length === 0 && unreported.lose.length === 0 && leasesFresh;
}

/** Attempts placed on the machine and not started: the answer's `placed`. */
export function placedOf(held: readonly Pick<HeldRow, 'id' | 'state'>[]): string[] {
  return held.filter((h) => h.state === 'scheduled').map((h) => h.id);
}

/**
 * A heartbeat: the machine is alive, and so are the attempts it names, whose leases it renews.
 * Any attempt it names that is no longer current (canceled, lost, superseded) comes back in
 * `kill`, with the reason; the agent stops that process.
 *
 * With `renewAfterMs`, a heartbeat that comes sooner than that after the last one written, and
 * whose list calls for nothing (no attempt to release, none missing), writes nothing: under load an
 * agent polls again each time work arrives, many times a second, while liveness and leases are
 * judged in seconds. Such a heartbeat is a read, and its transaction commits without a disk flush.
 */
export async function machineHeartbeat(tx: TxContext, p: HeartbeatParams): Promise<HeartbeatResult | null> {
  // A removed machine is unknown to its agent (404), which registers again.
  const m = await heartbeatMachine.first(tx.db, p.machineId);
  if (!m) return null;
  let health = m.health;
  let fresh = rowFresh(tx.now, m, p);
  if (health === 'suspect' || health === 'lost') {
    const res = await tx.db
      .updateTable('machines')
      .set({ health: 'ready', updated_at: tx.now })
      .where('id', '=', m.id)
      .where('health', '=', health)
      .executeTakeFirst();
    if (Number(res.numUpdatedRows) === 1) {
      await tx.event({ type: 'machine:ready', machineId: m.id, message: `machine ${m.name} is heartbeating again (was ${health})` });
      await tx.publish('capacity:freed', { machineId: m.id });
    }
    health = 'ready';
    fresh = false;
  }
  const held = await heldOn.rows(tx.db, m.id);
  const kill = await killList(tx.db, m.id, p.running, held);
  // Progress is news only the agent has: written whatever else the heartbeat skips, for the
  // attempt it names with its current token, while it runs (so one this machine holds).
  const stageOf = new Map(held.map((h) => [h.id, h.stage_id]));
  for (const r of p.running) {
    const stageId = stageOf.get(r.attemptId);
    if (!r.progress || stageId === undefined) continue;
    // Masked as its log is, where it enters: the job's view, /v1/attempts and the dashboard all
    // read this column, so none of them can show a secretEnv value the stage wrote there.
    const message = r.progress.message === undefined ? null : maskSecrets(r.progress.message, await secretsOf(tx.db, stageId));
    await setProgress.run(tx.db, r.progress.fraction, message, tx.now, r.attemptId, r.token, m.id);
  }
  const unreported = unreportedHeld(tx.now, held, p);
  const placed = placedOf(held);
  if (fresh && writesNothing(tx.now, unreported, p)) return { health, kill, lost: [], placed };
  await markHeartbeat.affected(tx.db, tx.now, p.period?.periodMs ?? null, m.id);
  await renewLeases(tx.db, m.id, leasesToRenew(p.running, kill), tx.now + p.leaseMs);
  const lost = await reconcileReported(tx, m, unreported, p.jitter);
  return { health, kill, lost, placed };
}

/** The attempts a heartbeat lists whose leases it renews: all but those its answer kills. */
export function leasesToRenew(running: readonly { attemptId: string }[], kill: HeartbeatResult['kill']): string[] {
  const killed = new Set(kill.map((k) => k.attemptId));
  return running.filter((r) => !killed.has(r.attemptId)).map((r) => r.attemptId);
}

/** Those attempts' leases extended to `until`, each while it is still running on the machine; how many were. */
export async function renewLeases(db: Db | Trx, machineId: string, attemptIds: readonly string[], until: number): Promise<number> {
  let renewed = 0;
  for (let i = 0; i < attemptIds.length; i += 500) {
    const r = await db
      .updateTable('attempts')
      .set({ lease_expires_at: until })
      .where('id', 'in', attemptIds.slice(i, i + 500))
      .where('machine_id', '=', machineId)
      .where('state', '=', 'running')
      .executeTakeFirst();
    renewed += Number(r.numUpdatedRows);
  }
  return renewed;
}

const heartbeatMachine = prepared<[id: string]>()((db, [id]) =>
  db
    .selectFrom('machines')
    .select(['id', 'name', 'health', 'last_heartbeat_at', 'heartbeat_ms'])
    .where('id', '=', id)
    .where('scheduling', '!=', MachineScheduling.removed),
);
const setProgress = prepared<[fraction: number, message: string | null, at: number, id: string, token: number, machineId: string]>()(
  (db, [fraction, message, at, id, token, machineId]) =>
    db
      .updateTable('attempts')
      .set({ progress: fraction, progress_message: message, progress_at: at })
      .where('id', '=', id)
      .where('token', '=', token)
      .where('machine_id', '=', machineId)
      .where('state', '=', 'running'),
);
const markHeartbeat = prepared<[at: number, periodMs: number | null, id: string]>()((db, [at, periodMs, id]) =>
  db.updateTable('machines').set({ last_heartbeat_at: at, heartbeat_ms: periodMs }).where('id', '=', id),
);
/** What a machine holds: attempts placed on it and not yet released, a small set however long its history (a partial index). */
const heldOn = prepared<[machineId: string]>()((db, [machineId]) =>
  db
    .selectFrom('attempts')
    .select(['id', 'stage_id', 'token', 'state', 'machine_id', 'reason', 'started_at', 'lease_expires_at'])
    .where('machine_id', '=', machineId)
    .where('released_at', 'is', null),
);
export type HeldRow = Awaited<ReturnType<typeof heldOn.rows>>[number];

/** Rows a statement of machinesSeen writes at most: three parameters each, far under either database's limit. */
const SEEN_CHUNK = 1024;
/** The fewest rows a statement of machinesSeen is written with (see seenRows). */
const SEEN_MIN = 16;

/**
 * The rows a statement of machinesSeen is written with for `n` machines, where it writes them
 * together (PostgreSQL): the next power of two (16 at least), the rest padding that names no
 * machine. Each length is its own statement text, and a text may be prepared and kept (named
 * statements on PostgreSQL, named-statements.ts): with a row count per flush (10,000 machines: 9 ×
 * 1,000 and a tail of whatever is left) one per flush's length. Padded, there are seven texts at
 * most. (Measured on SQLite, before its flush went row by row: a server at 10,000 agents held 232
 * of them in its statement cache, each 300 KiB of SQLite's memory; docs/throughput.md, "Where the
 * heap goes".)
 */
export function seenRows(n: number): number {
  let rows = SEEN_MIN;
  while (rows < n) rows *= 2;
  return rows;
}

/**
 * Heartbeats a replica kept in memory (the heartbeat route's HeartbeatLiveness), written a batch at
 * a time: one `UPDATE … FROM (VALUES …)` per 1,024 machines, each row set to its own time and
 * never moved back (a later heartbeat written directly, by this replica or another, stands).
 * Rows in id order, so that two of these, or one and a plan locking its machines, take row locks
 * in one order.
 */
export async function machinesSeen(tx: TxContext, seen: readonly MachineSeen[]): Promise<number> {
  // One row a machine, its latest time: a machine named twice in one statement would be set to either.
  const latest = new Map<string, MachineSeen>();
  for (const s of seen) if (!((latest.get(s.machineId)?.at ?? -Infinity) >= s.at)) latest.set(s.machineId, s);
  const rows = Array.from(latest.values()).sort((a, b) => (a.machineId < b.machineId ? -1 : a.machineId > b.machineId ? 1 : 0));
  let moved = 0;
  // Where a statement is no round trip (SQLite), one prepared statement a row: nothing to compile
  // or cache per flush, where the joined statement built and bound a text of up to 1,024 rows
  // (3,072 values) each time, kept seven of them prepared (300 KiB of SQLite's memory each), and
  // cost more to run (a scratch timing: docs/throughput.md, "What the slowest heartbeats waited on").
  if (!tx.setBased) {
    // Not let the event loop turn between rows: the transaction holds SQLite's write lock, and a
    // second connection in the process (another store on the file) waiting on it synchronously
    // (busy_timeout) would hold the loop the flush needs to finish ("database is locked":
    // machine-reap.test.ts).
    for (const r of rows) moved += await seenOne.affected(tx.db, r.at, r.periodMs ?? null, r.machineId);
    return moved;
  }
  for (let i = 0; i < rows.length; i += SEEN_CHUNK) {
    const part = rows.slice(i, i + SEEN_CHUNK);
    // Padding rows have a null id: `machines.id = null` matches no machine.
    const pad = Array.from({ length: seenRows(part.length) - part.length }, () => sql`(${null}, cast(${null} as bigint), cast(${null} as integer))`);
    const values = sql.join([...part.map((r) => sql`(${r.machineId}, cast(${r.at} as bigint), cast(${r.periodMs ?? null} as integer))`), ...pad]);
    // Each row with the period that heartbeat's answer gave: its silence is judged by it.
    const res = await sql`with seen(id, at, period) as (values ${values})
      update machines set last_heartbeat_at = seen.at, heartbeat_ms = seen.period from seen
      where machines.id = seen.id and machines.last_heartbeat_at < seen.at`.execute(tx.db);
    moved += Number(res.numAffectedRows ?? 0);
  }
  return moved;
}

/** One machine's heartbeat kept in memory, never moving its row back (machinesSeen, SQLite). */
const seenOne = prepared<[at: number, period: number | null, id: string]>()((db, [at, period, id]) =>
  db.updateTable('machines').set({ last_heartbeat_at: at, heartbeat_ms: period }).where('id', '=', id).where('last_heartbeat_at', '<', at),
);

/**
 * Machines expected to heartbeat: not removed, and not lost, or lost less than
 * LOST_STILL_HEARTBEATING_MS ago. One count, read by each server every liveness flush.
 *
 * A machine judged lost by a control plane that fell behind is alive and heartbeats again within
 * its period; left out of the count at once, a wave of such losses shrank the period every agent
 * is told, and the whole fleet, the lost included, heartbeated faster into servers already behind:
 * 10,000 agents on PostgreSQL × 2 were on a 2 s period instead of 8 s in the churn the branch
 * `collapse` took apart (docs/failure-detection.md, "A period that grows with the fleet"). A
 * machine really dead leaves the count once its loss is that old.
 */
export async function machinesHeartbeating(db: Db, now: number): Promise<number> {
  const r = await db
    .selectFrom('machines')
    .select((e) => e.fn.countAll<number>().as('n'))
    .where('scheduling', '!=', MachineScheduling.removed)
    .where((e) => e.or([e('health', '!=', MachineHealth.lost), e('updated_at', '>=', now - LOST_STILL_HEARTBEATING_MS)]))
    .executeTakeFirstOrThrow();
  return Number(r.n);
}

/** Twice the longest period an agent is told (MAX_HEARTBEAT_PERIOD_MS): a lost machine alive has heartbeated again well within it. */
export const LOST_STILL_HEARTBEATING_MS = 2 * MAX_HEARTBEAT_PERIOD_MS;

/**
 * Which of the attempts an agent runs it must kill, and why: read-only, for a held long-poll too.
 * `held` (what the machine holds, when the caller has read it) answers for nearly every attempt
 * listed; only those it does not hold (released, placed elsewhere, unknown) are read by id.
 */
export async function killList(
  db: Db | Trx,
  machineId: string,
  running: { attemptId: string; token: number }[],
  held?: readonly HeldRow[],
): Promise<HeartbeatResult['kill']> {
  if (running.length === 0) return [];
  const byId = new Map<string, Pick<HeldRow, 'id' | 'token' | 'state' | 'machine_id' | 'reason'>>(
    (held ?? (await heldOn.rows(db, machineId))).map((r) => [r.id, r]),
  );
  const elsewhere = running.filter((r) => !byId.has(r.attemptId)).map((r) => r.attemptId);
  for (const r of await fencesById.rows(db, elsewhere)) byId.set(r.id, r);
  const { kill, preempted } = killOf(machineId, running, byId);
  // A preempted attempt gets its stage's grace to checkpoint (one read, for those only).
  if (preempted.length) {
    const rows = await db
      .selectFrom('attempts')
      .innerJoin('stages', 'stages.id', 'attempts.stage_id')
      .select(['attempts.id', 'stages.definition'])
      .where(
        'attempts.id',
        'in',
        preempted.map((k) => k.attemptId),
      )
      .execute();
    const grace = new Map(rows.map((r) => [r.id, preemptionGraceMs(JSON.parse(r.definition) as StageDefinition)]));
    for (const k of preempted) {
      const g = grace.get(k.attemptId);
      if (g !== undefined) k.graceMs = g;
    }
  }
  return kill;
}

type Fence = Pick<HeldRow, 'id' | 'token' | 'state' | 'machine_id' | 'reason'>;

/** Which listed attempts to kill, from their fences (`byId`: every one the database has); `preempted`: those of them preempted, whose grace is still to read. */
export function killOf(
  machineId: string,
  running: readonly { attemptId: string; token: number }[],
  byId: ReadonlyMap<string, Fence>,
): { kill: HeartbeatResult['kill']; preempted: HeartbeatResult['kill'] } {
  const kill: HeartbeatResult['kill'] = [];
  const preempted: HeartbeatResult['kill'] = [];
  for (const r of running) {
    const a = byId.get(r.attemptId);
    if (!a) kill.push({ attemptId: r.attemptId, reason: 'unknown attempt' });
    else if (a.machine_id !== machineId || Number(a.token) !== r.token) kill.push({ attemptId: r.attemptId, reason: 'stale token' });
    else if (!isAttemptActive(a.state)) {
      kill.push({ attemptId: r.attemptId, reason: `attempt is ${a.state}${a.reason ? `: ${a.reason}` : ''}` });
      if (a.state === 'preempted') preempted.push(kill[kill.length - 1]!);
    }
  }
  return { kill, preempted };
}

/**
 * The agent's list against the database. An attempt it no longer lists has no process any more:
 * its resources are released. One the database says is running but the agent has stopped
 * listing (it crashed and restarted, or lost the process) is lost once it started more than
 * `missingAfterMs` before this heartbeat, so a list sent just before the start is not misread;
 * never one in `spare` (started at placement, its answer perhaps not seen when this was sent);
 * and, where the agent says what its list knows of (`knownAsOf`), only one that started before
 * that, by the clocks' margin: a later one may be in an answer the agent had not read when it
 * made the list, however long the heartbeat then took to arrive (docs/failure-detection.md,
 * "What a heartbeat's list knows").
 */
interface Unreported {
  release: HeldRow[];
  lose: HeldRow[];
  oldestListedLease: number | null;
}
export function unreportedHeld(
  now: number,
  held: readonly HeldRow[],
  p: { running: { attemptId: string }[]; missingAfterMs: number; spare?: readonly string[]; knownAsOf?: number },
): Unreported {
  const reported = new Set(p.running.map((r) => r.attemptId));
  // Started at placement and maybe not yet heard of by the agent when it sent this: no evidence.
  const spared = new Set(p.spare);
  const out: Unreported = { release: [], lose: [], oldestListedLease: null };
  for (const a of held) {
    if (reported.has(a.id)) {
      // The listed attempts' leases come with the same read: what a skipped write would leave.
      if (a.state === 'running' && a.lease_expires_at !== null) {
        out.oldestListedLease = Math.min(out.oldestListedLease ?? Number.POSITIVE_INFINITY, Number(a.lease_expires_at));
      }
      continue;
    }
    if (a.state === 'running' && a.started_at !== null && Number(a.started_at) < now - p.missingAfterMs) {
      if (!spared.has(a.id) && (p.knownAsOf === undefined || Number(a.started_at) < p.knownAsOf - KNOWN_AS_OF_MARGIN_MS)) out.lose.push(a);
    } else if (!isAttemptActive(a.state)) out.release.push(a);
  }
  return out;
}

async function reconcileReported(
  tx: TxContext,
  m: { id: string; name: string },
  held: { release: HeldRow[]; lose: HeldRow[] },
  jitter: number,
): Promise<string[]> {
  const lost: string[] = [];
  const lose = held.lose.length
    ? await tx.db
        .selectFrom('attempts')
        .selectAll()
        .where(
          'id',
          'in',
          held.lose.map((a) => a.id),
        )
        .execute()
    : [];
  for (const a of lose) {
    if (await loseAttempt(tx, a, `agent on ${m.name} no longer reports it`, jitter)) lost.push(a.id);
  }
  const release = [...held.release, ...held.lose];
  for (const a of release) {
    await tx.db.updateTable('attempts').set({ released_at: tx.now }).where('id', '=', a.id).where('released_at', 'is', null).execute();
  }
  if (release.length) await tx.publish('capacity:freed', { machineId: m.id });
  return lost;
}

const fencesById = preparedList((db, ids) => db.selectFrom('attempts').select(['id', 'token', 'state', 'machine_id', 'reason']).where('id', 'in', ids));
const ASSIGNMENT_COLUMNS = [
  'attempts.id as id',
  'attempts.token as token',
  'attempts.job_id as job_id',
  'attempts.stage_name as stage_name',
  'attempts.number as number',
  'attempts.gpu_indices as gpu_indices',
  'attempts.gpu_milli as gpu_milli',
  'attempts.gpu_memory_bytes as gpu_memory_bytes',
  'attempts.gang_id as gang_id',
  'attempts.gang_rank as gang_rank',
  'attempts.gang_size as gang_size',
  'attempts.gang_master_port as gang_master_port',
  'stages.definition as definition',
  'attempts.machine_id as machine_id',
  'attempts.state as state',
] as const;
const placedNotStarted = prepared<[machineId: string]>()((db, [machineId]) =>
  db
    .selectFrom('attempts')
    .innerJoin('stages', 'stages.id', 'attempts.stage_id')
    .select(ASSIGNMENT_COLUMNS)
    .where('attempts.machine_id', '=', machineId)
    .where('attempts.state', '=', 'scheduled')
    .orderBy('attempts.scheduled_at'),
);
/** Attempts by id, with what an assignment is built of: those a report's transaction started at placement. */
const assignmentsById = preparedList((db, ids) =>
  db.selectFrom('attempts').innerJoin('stages', 'stages.id', 'attempts.stage_id').select(ASSIGNMENT_COLUMNS).where('attempts.id', 'in', ids),
);
/**
 * The jobs' stages whose outputs are committed, each with its manifest (docs/rerun.md: a reused
 * stage's are the original's files, named by the attempt that produced them): one row a file, one
 * row with a null path for a stage without any. One round trip, where the stages and then their
 * files were two, one after the other, between a report's commit and its answer.
 */
const committedOutputsOfJobs = preparedList((db, jobIds) =>
  db
    .selectFrom('stages')
    .leftJoin('output_files', 'output_files.stage_id', 'stages.id')
    .select([
      'stages.id as id',
      'stages.job_id as job_id',
      'stages.name as name',
      'stages.output_attempt_id as output_attempt_id',
      'output_files.path as path',
      'output_files.size as size',
    ])
    .where('stages.job_id', 'in', jobIds)
    .where('stages.output_attempt_id', 'is not', null)
    .orderBy('stages.id')
    .orderBy('output_files.path'),
);

/**
 * Attempts placed on this machine and not started, with everything to run them; `exclude` names
 * the ones the agent already has (it lists them while it starts them), which are not rebuilt.
 */
export async function machineAssignments(
  db: Db,
  machineId: string,
  exclude: readonly string[] = [],
  outputs?: OutputPolicy,
  started: readonly string[] = [],
): Promise<Assignment[]> {
  // What the agent already has is left out here rather than in the query: the placed and not
  // started are few (a machine's slots), and one fixed query text is prepared once.
  const excluded = new Set(exclude);
  // Started at placement: still running here (a cancel since is its heartbeat's to tell). The two
  // reads at once (on PostgreSQL, two of the pool's connections; a report's answer waits for them
  // after its commit): both are read after that commit, and each row is taken from one of them.
  const [byId, placed] = await Promise.all([started.length ? assignmentsById.rows(db, [...started]) : [], placedNotStarted.rows(db, machineId)]);
  const startedRows = byId.filter((r) => r.machine_id === machineId && r.state === 'running' && !excluded.has(r.id));
  const rows = [...startedRows, ...placed.filter((r) => !excluded.has(r.id))];
  if (rows.length === 0) return [];
  const defs = rows.map((r) => JSON.parse(r.definition) as StageDefinition);
  // Upstream outputs for all of them in one query, not one per assignment.
  const jobIds = [...new Set(rows.filter((_, i) => defs[i]!.needs.length).map((r) => r.job_id))];
  const upstream: { id: string; job_id: string; name: string; output_attempt_id: string | null }[] = [];
  const filesOf = new Map<string, OutputFile[]>();
  for (const f of await committedOutputsOfJobs.rows(db, jobIds)) {
    let list = filesOf.get(f.id);
    if (!list) {
      filesOf.set(f.id, (list = []));
      upstream.push(f);
    }
    if (f.path !== null) list.push({ path: f.path, size: Number(f.size) });
  }
  const gangs = await gangRendezvous(db, rows);
  return rows.map((r, i) => {
    const def = defs[i]!;
    const inputs: Assignment['inputs'] = upstream
      .filter((u) => u.job_id === r.job_id && def.needs.includes(u.name))
      .sort((a, b) => def.needs.indexOf(a.name) - def.needs.indexOf(b.name))
      .map((u) => ({ stage: u.name, attemptId: u.output_attempt_id!, files: filesOf.get(u.id) ?? [] }));
    return {
      attemptId: r.id,
      token: Number(r.token),
      jobId: r.job_id,
      stageName: r.stage_name,
      attemptNumber: Number(r.number),
      command: def.command,
      // Secrets travel to the agent that runs the stage, and nowhere else (docs/security.md).
      env: { ...def.env, ...(def.secretEnv ?? {}) },
      gpuIndices: JSON.parse(r.gpu_indices),
      // A share of its one GPU, as the attempt holds it (the agent bounds it under MPS): from the
      // attempt's row, not the definition, so it is what was placed.
      ...(Number(r.gpu_milli) < 1000
        ? { gpuShare: { milli: Number(r.gpu_milli), ...(r.gpu_memory_bytes !== null ? { memoryBytes: Number(r.gpu_memory_bytes) } : {}) } }
        : {}),
      timeoutSeconds: def.timeoutSeconds,
      disconnectGraceSeconds: def.disconnectGraceSeconds ?? null,
      ...(def.preemptible ? { checkpoint: true } : {}),
      inputs,
      limits: attemptLimits(def, outputs),
      ...(gangs.has(r.id) ? { gang: gangs.get(r.id)! } : {}),
      ...(r.state === 'running' ? { started: true } : {}),
    };
  });
}

/**
 * What the agent's containment applies to an attempt of this stage: its request, its limits above
 * it (none for a definition stored before limits existed), its network; and, given the server's
 * policy, what it may leave as outputs.
 */
function attemptLimits(def: StageDefinition, outputs: OutputPolicy | undefined): AttemptLimits {
  return {
    requestCpuMillis: def.resources.cpuMillis,
    requestMemoryBytes: def.resources.memoryBytes,
    ...stageLimits(def),
    network: def.network ?? false,
    ...(outputs ? { outputs: effectiveOutputLimits(def.outputLimits, outputs) } : {}),
  };
}

/** A machine silent past its allowance: what the reaper read of it, and the health its silence calls for. */
export interface SilentMachine {
  id: string;
  name: string;
  health: MachineHealth;
  /** The heartbeat time read: the reaper's write is guarded on it (a heartbeat since moves it). */
  lastHeartbeatAt: number;
  to: MachineHealth;
  silentMs: number;
}

/**
 * Failure detection by silence. `suspect` only stops new placements (a slow heartbeat is not yet
 * a dead machine); `lost` gives the machine's work to others. Deadlines come from one clock, the
 * caller's, compared with heartbeat times that the same clock wrote. A cordoned or draining
 * machine is judged as any other: taking no new work does not make it immune to dying.
 *
 * Read outside any transaction, and then judged REAP_BATCH to a transaction, each with its own guarded write
 * (`machinesReap`; docs/failure-detection.md, "The reaper under load"). In one SERIALIZABLE
 * transaction, the read of every machine depended on every heartbeat and report written beside
 * it: at 5,000 agents on PostgreSQL x 2 it was refused for read/write dependencies 20 times in a
 * row at 195 passes of 200 (StoreBusyError), and the stopped machine was not found lost.
 */
export async function silentMachines(
  db: Db,
  p: { now: number; suspectAfterMs: number; lostAfterMs: number; heartbeatMs?: number; heard?: HeardAt },
): Promise<{ silent: SilentMachine[]; lostDueAt?: number }> {
  // Each machine by the period it was last told (docs/failure-detection.md, "A period that grows
  // with the fleet"): the query finds every machine silent past the shortest allowance, and each
  // is then judged by its own, which a longer period grows.
  const silent = await db
    .selectFrom('machines')
    .select(['id', 'name', 'health', 'last_heartbeat_at', 'heartbeat_ms'])
    .where('health', 'in', [MachineHealth.ready, MachineHealth.suspect])
    .where('scheduling', '!=', MachineScheduling.removed)
    .where('last_heartbeat_at', '<', p.now - p.suspectAfterMs)
    .execute();
  const out: SilentMachine[] = [];
  // The earliest time a machine read here, silent past its suspect allowance but not yet past its
  // loss, runs out of it: the duty's next pass is aimed there (ReapResult.lostDueAt).
  let lostDueAt = Infinity;
  for (const m of silent) {
    // A later arrival this replica holds unwritten counts: the row lags the machine by the liveness
    // loop's period, and a flush refused (StoreBusyError) lags it further. The write below stays
    // guarded on the row's time; the arrival only spares the machine from this pass.
    const age = p.now - Math.max(Number(m.last_heartbeat_at), p.heard?.(m.id) ?? -Infinity);
    const grow = p.heartbeatMs === undefined ? 0 : silenceGrowthMs(m.heartbeat_ms === null ? null : Number(m.heartbeat_ms), p.heartbeatMs);
    if (age < p.suspectAfterMs + grow) continue;
    const to: MachineHealth = age >= p.lostAfterMs + grow ? 'lost' : 'suspect';
    if (to === 'suspect') lostDueAt = Math.min(lostDueAt, p.now - age + p.lostAfterMs + grow);
    if (to === m.health) continue;
    out.push({ id: m.id, name: m.name, health: m.health, lastHeartbeatAt: Number(m.last_heartbeat_at), to, silentMs: age });
  }
  // By id, and each machine's attempts by id (machinesReap): the order in which the lost-attempts
  // duty takes the same attempts' rows (overdueAttempts), so the two reapers never wait on each
  // other in a circle (a deadlock PostgreSQL breaks only after a second).
  const sorted = out.sort((x, y) => (x.id < y.id ? -1 : x.id > y.id ? 1 : 0));
  return lostDueAt === Infinity ? { silent: sorted } : { silent: sorted, lostDueAt };
}

const SILENT_TYPES = ['text', 'text', 'bigint', 'text'] as const;
/** A batch of silent machines to their new health, each guarded on the health and heartbeat time read. */
const judgeMachines = preparedBySize(REAP_BATCH, (n) =>
  prepared<unknown[]>()((db, [at, ...values]) =>
    db
      .updateTable('machines')
      .from(valuesTable(values, SILENT_TYPES, n))
      .set({ health: v(4), updated_at: at as number })
      .where(sql<boolean>`"machines"."id" = v.column1 and "machines"."health" = v.column2 and "machines"."last_heartbeat_at" = v.column3`)
      .where('machines.id', 'in', keysOf(values, SILENT_TYPES, n))
      .returning('id'),
  ),
);

/**
 * Silent machines to the health their silence calls for, each with its event, and the active
 * attempts of those lost lost with them (loseMany): one guarded write for the batch's machines,
 * one read of the lost ones' attempts, and their losses set-based (docs/failure-detection.md, "A
 * batch's losses set-based"). Each machine's write is guarded on the health and heartbeat time
 * read, so that a heartbeat written since (the machine is alive) leaves it and its attempts as
 * they are. The transaction reads and writes those machines' rows and attempts only: a heartbeat
 * of another machine does not conflict with it.
 */
export async function machinesReap(tx: TxContext, batch: readonly SilentMachine[], p: { jitter: number }): Promise<ReapResult> {
  const result: ReapResult = { machines: [], lostAttempts: [] };
  const judged = await writeRows(
    tx,
    judgeMachines,
    batch.map((m) => [m.id, m.health, m.lastHeartbeatAt, m.to]),
    REAP_BATCH,
  );
  const lost = new Map<string, SilentMachine>();
  for (const m of batch) {
    if (!judged.has(m.id)) continue;
    result.machines.push({ machineId: m.id, from: m.health, to: m.to });
    await tx.event({
      type: `machine:${m.to}`,
      machineId: m.id,
      message: `machine ${m.name} ${m.to}: no heartbeat for ${(m.silentMs / 1000).toFixed(1)} s`,
      data: { silentMs: m.silentMs },
    });
    if (m.to === 'lost') lost.set(m.id, m);
  }
  if (lost.size === 0) return result;
  const attempts = await tx.db
    .selectFrom('attempts')
    .selectAll()
    .where('machine_id', 'in', [...lost.keys()])
    // Active attempts are all still held: this finds them through attempts_held.
    .where('released_at', 'is', null)
    .where('state', 'in', activeAttemptStates)
    // The one order both reapers take attempts' rows in (silentMachines).
    .orderBy('machine_id')
    .orderBy('id')
    .execute();
  result.lostAttempts = await loseMany(
    tx,
    attempts.map((a) => ({ a, reason: `machine ${lost.get(a.machine_id)!.name} lost` })),
    p.jitter,
  );
  return result;
}
