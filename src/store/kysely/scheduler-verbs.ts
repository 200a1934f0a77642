import { CompiledQuery, sql } from 'kysely';
import type { StageState } from '../../domain/stage-state.js';
import { preemptionGraceMs, type StageDefinition } from '../../domain/job-definition.js';
import { AttemptEndKind } from '../../domain/attempt-end.js';
import { newId } from '../../domain/ids.js';
import { machineRefusal } from '../../scheduler/checks.js';
import type { GangMember, MachineView, Plan, PlannedPlacement, QueuedStage, QueueShape } from '../../scheduler/snapshot.js';
import { placementMembers } from '../../scheduler/placement-members.js';
import type { AttemptRecord } from '../records.js';
import { GPU_MILLI_WHOLE } from '../../domain/resources.js';
import { allocationProblem, takeAllocation } from '../../scheduler/placement-fit.js';
import type { AttemptsTable } from '../schema.js';
import type { PlanApplyResult } from '../store.js';
import { emptyUsage, machineUsage, type Usage } from './machine-usage.js';
import { machineView } from './cluster-view.js';
import { syncJobsOnActivation } from './sync-job-state.js';
import { applyOutcome } from './apply-outcome.js';
import { endActiveAttempt } from './attempt-verbs.js';
import { endGang, rankText, stageAttemptId } from './gang-end.js';
import { reserveGangPort } from './gang-rendezvous.js';
import { isAttemptActive } from '../../domain/attempt-state.js';
import { execute, prepared, preparedBySize, preparedList } from './prepared-query.js';
import { toAttempt } from './row-mappers.js';
import { claimOne, claimStages, type StageClaim } from './claim-stages.js';
import type { Db, EventInput, TxContext } from './tx-context.js';

/**
 * `'ready'` written into the SQL text of the queue's reads, never bound as a value: the queue index
 * (stages_ready, migration 0016) holds only ready stages, and a planner uses such a partial index
 * only for a query whose text implies its condition.
 */
export const QUEUE_STATE = sql.lit<StageState>('ready');

/** An attempt row's columns in one fixed order: the arguments of `insertAttempt`. */
const ATTEMPT_COLUMNS = [
  'id',
  'stage_id',
  'job_id',
  'stage_name',
  'number',
  'token',
  'machine_id',
  'gpu_indices',
  'gpu_type',
  'gpu_milli',
  'gpu_memory_bytes',
  'cpu_millis',
  'memory_bytes',
  'state',
  'exit_code',
  'signal',
  'reason',
  'pid',
  'outputs',
  'lease_expires_at',
  'scheduled_at',
  'started_at',
  'finished_at',
  'released_at',
  'log_bytes',
  'stdout_bytes',
  'stderr_bytes',
  'gang_id',
  'gang_rank',
  'gang_size',
  'gang_master_port',
] as const satisfies readonly (keyof AttemptsTable)[];
// The row is typed where it is built; its values travel as a list in ATTEMPT_COLUMNS' order.
const attemptValues = (r: AttemptsTable): unknown[] => ATTEMPT_COLUMNS.map((c) => r[c]);
/**
 * Up to this many attempt rows in one statement: a pass's new attempts go in together at the end of
 * planApply, one round trip on PostgreSQL rather than one each (issue 32; docs/throughput.md).
 */
const ATTEMPTS_PER_INSERT = 16;
const insertAttempts = preparedBySize(ATTEMPTS_PER_INSERT, (n) =>
  prepared<unknown[]>()((db, v) =>
    db
      .insertInto('attempts')
      .values(
        Array.from(
          { length: n },
          (_, r) => Object.fromEntries(ATTEMPT_COLUMNS.map((c, i) => [c, v[r * ATTEMPT_COLUMNS.length + i]])) as unknown as AttemptsTable,
        ),
      ),
  ),
);

/** A plan's machines, read and locked in one statement (PostgreSQL: see planApply), in id order so that two passes lock them alike. */
const lockMachines = preparedList((db, ids) => db.selectFrom('machines').selectAll().where('id', 'in', ids).orderBy('id').forUpdate());
const machinesById = preparedList((db, ids) => db.selectFrom('machines').selectAll().where('id', 'in', ids));
/** A plan's stages, each with its job's state (syncJobStateOnActivation's read, in the same statement). */
const stagesToPlace = preparedList((db, ids) =>
  db
    .selectFrom('stages')
    .innerJoin('jobs', 'jobs.id', 'stages.job_id')
    .select(['stages.id', 'stages.job_id', 'stages.name', 'stages.token', 'stages.state', 'stages.ready_since', 'stages.pool', 'jobs.state as job_state'])
    .where('stages.id', 'in', ids),
);

/** Compiled once: every pass runs it (a template built anew each time is JavaScript the pass need not run). */
export const READY_SHAPES = CompiledQuery.raw(`
    with recursive s(shape) as (
      select min(shape) from stages where state = 'ready'
      union all
      select (select min(shape) from stages where state = 'ready' and shape > s.shape) from s where s.shape is not null
    )
    select shape from s where shape is not null`) as CompiledQuery<{ shape: string }>;

/**
 * The shapes that have ready stages, each with what its stages ask for. The shapes are found by
 * walking the queue index (stages_ready, by shape) from one ready shape to the next (a loose index scan), so
 * this costs the number of shapes, not the number of stages waiting. A shape's request never
 * changes, so it is remembered once read.
 */
export async function readyShapes(db: Db, known: Map<string, QueueShape>): Promise<QueueShape[]> {
  return shapesOf(db, (await execute(db, READY_SHAPES)).rows, known);
}

/** The ready shapes of these rows of READY_SHAPES, each with its request (read once per shape). */
export async function shapesOf(db: Db, rows: readonly { shape: string }[], known: Map<string, QueueShape>): Promise<QueueShape[]> {
  const out: QueueShape[] = [];
  for (const { shape } of rows) {
    const q = await shapeRequest(db, shape, known);
    if (q) out.push(q);
  }
  return out;
}

/** What a shape's stages ask for: read from one of its ready stages, once (a shape's request never changes). */
async function shapeRequest(db: Db, shape: string, known: Map<string, QueueShape>): Promise<QueueShape | null> {
  const q = known.get(shape);
  if (q) return q;
  const r = await db
    .selectFrom('stages')
    .innerJoin('jobs', 'jobs.id', 'stages.job_id')
    .select(['stages.pool', 'stages.definition', 'jobs.team'])
    .where('stages.state', '=', QUEUE_STATE)
    .where('stages.shape', '=', shape)
    .limit(1)
    .executeTakeFirst();
  if (!r) return null;
  const def = JSON.parse(r.definition) as StageDefinition;
  const read: QueueShape = {
    shape,
    pool: r.pool,
    resources: def.resources,
    placement: def.placement,
    team: r.team,
    preemptible: def.preemptible === true,
    timeoutSeconds: def.timeoutSeconds,
  };
  if (known.size > 10_000) known.clear();
  known.set(shape, read);
  return read;
}

const shapeHead = prepared<[shape: string, now: number, limit: number]>()((db, [shape, now, limit]) =>
  db
    .selectFrom('stages')
    .select(['id', 'job_id', 'name', 'priority', 'created_at', 'ready_since'])
    .where('state', '=', QUEUE_STATE)
    .where('shape', '=', shape)
    .where((eb) => eb.or([eb('not_before', 'is', null), eb('not_before', '<=', now)]))
    .orderBy('priority', 'desc')
    .orderBy('created_at', 'asc')
    .orderBy('job_id', 'asc')
    .orderBy('ready_since', 'asc')
    .limit(limit),
);

/**
 * The head of each shape's queue (priority, then the job's age, then the stage's), at most `limit`
 * stages whose backoff has passed. What they ask for is their shape's (the same for all of them),
 * so no stage's definition is read.
 */
export async function queueHeads(
  db: Db,
  p: { now: number; shapes: { shape: string; limit: number }[] },
  known: Map<string, QueueShape>,
): Promise<QueuedStage[]> {
  const queue: QueuedStage[] = [];
  for (const { shape, limit } of p.shapes) {
    if (limit <= 0) continue;
    const request = await shapeRequest(db, shape, known);
    if (!request) continue;
    for (const r of await shapeHead.rows(db, shape, p.now, limit)) {
      queue.push({
        stageId: r.id,
        jobId: r.job_id,
        stageName: r.name,
        pool: request.pool,
        priority: Number(r.priority),
        readySince: Number(r.ready_since ?? 0),
        // A stage is created with its job: its created_at is the job's submission.
        submittedAt: Number(r.created_at),
        resources: request.resources,
        placement: request.placement,
        ...(request.team !== undefined ? { team: request.team } : {}),
        ...(request.preemptible ? { preemptible: true } : {}),
        ...(request.timeoutSeconds ? { timeoutSeconds: request.timeoutSeconds } : {}),
      });
    }
  }
  return queue;
}

/** A gang's next attempt number: one more than the stage's highest (its members share one; their tokens differ). */
const highestNumber = prepared<[stageId: string]>()((db, [stageId]) =>
  db
    .selectFrom('attempts')
    .select((eb) => eb.fn.max('number').as('n'))
    .where('stage_id', '=', stageId),
);

/** One member's part of a placement: its machine and GPUs, with the request every member makes. */
function memberPlacement(pl: PlannedPlacement, mem: GangMember): PlannedPlacement {
  const { members: _members, ...one } = pl;
  return { ...one, machineId: mem.machineId, gpuIndices: mem.gpuIndices };
}

/**
 * Why a placement cannot be applied as it stands (null: it can), for every member of a gang: a
 * gang is applied whole or not at all, so one member's machine gone or full skips it all.
 */
function placementProblem(pl: PlannedPlacement, members: readonly GangMember[], byId: Map<string, MachineView>): string | null {
  const gang = members.length > 1;
  const seen = new Set<string>();
  for (const mem of members) {
    const m = byId.get(mem.machineId);
    const who = gang ? `gang member rank ${mem.rank}${m ? ` on ${m.name}` : ''}: ` : '';
    if (!m || machineRefusal(m) !== null) return `${who}machine no longer takes work`;
    // Members never share a machine (the planner's rule): a plan that says otherwise is refused, not half-checked.
    if (seen.has(m.id)) return `${who}another member is placed on the same machine`;
    seen.add(m.id);
    // The same fit rule the planner used (shares of a GPU included), against what the machine holds now.
    if (allocationProblem(m, memberPlacement(pl, mem)) !== null) return `${who}machine no longer has room`;
  }
  return null;
}

/**
 * Applies the scheduler's plan, re-checking every placement against the state as it is now
 * (Nomad's plan applier does the same): the stage must still be ready and the machine ready and
 * eligible, with the room and the very GPU devices the plan named. The stage's fencing token grows by one and
 * becomes the new attempt's token. A gang's placement (docs/gangs.md, "Gangs in the store") is
 * checked member by member and written whole or skipped whole: one attempt row per member, linked
 * by rank 0's id; the stage's token grows by the gang's size, each member taking its own.
 */
export async function planApply(
  tx: TxContext,
  p: {
    plan: Plan;
    leaseMs: number;
    jitter?: number;
    /** Machines whose placements are written `running` at once, each a report's in this transaction
     *  that asked (start-on-placement.ts); a gang's members are placed `scheduled` everywhere. */
    startOn?: ReadonlySet<string>;
    /**
     * What attempts hold on each machine, read earlier in this same transaction with no write
     * since (clusterAndUsage, by the pass before a commit): taken instead of reading it again. The
     * transaction sees one state throughout (PostgreSQL's SERIALIZABLE reads one snapshot; SQLite
     * has one writer), so a second read would answer the same rows; what changed meanwhile in
     * other transactions is caught as before, by the machines' lock below and the commit.
     * Absent (a plan from the loop, in a transaction of its own): read here.
     */
    held?: ReadonlyMap<string, Usage>;
  },
): Promise<PlanApplyResult> {
  const skipped: PlanApplyResult['skipped'] = [];
  const applied: AttemptRecord[] = [];
  const machineIds = [...new Set(p.plan.placements.flatMap((x) => placementMembers(x).map((mem) => mem.machineId)))];
  // PostgreSQL: the plan's machines locked before anything is read. Every idle heartbeat writes its
  // machine's row and reads the attempts held on it; this transaction reads those rows and inserts
  // attempts, so each heartbeat that ran beside it closed a cycle of read/write dependencies and,
  // committing first, made this one fail: with 50 agents heartbeating, every try of the pass
  // failed (bench:fleet, StoreBusyError after 20 tries, nothing placed). Locked, a heartbeat of
  // these machines waits for the commit and is the one that runs again (a few ms), not the pass.
  // Their rows are read by the same statement that locks them (one round trip, not two).
  const machines = tx.concurrent ? await lockMachines.rows(tx.db, [...machineIds].sort()) : await machinesById.rows(tx.db, machineIds);
  const usage = p.held ?? (await machineUsage(tx.db, machineIds));
  const byId = new Map(machines.map((m) => [m.id, machineView(m, usage.get(m.id) ?? emptyUsage(), true)]));
  const rows = new Map(machines.map((m) => [m.id, m]));
  // Gang ports reserved by this plan, by rank 0's machine: two gangs placed in one pass get two.
  const gangPorts = new Map<string, Set<number>>();
  const jobsTouched = new Set<string>();
  /** Jobs with a stage started at placement: they move as an acknowledgement would move them. */
  const jobsStarted = new Set<string>();
  const wake = new Set<string>();
  /** The attempts placed, written together after the loop: nothing in it reads them back (gang ports this plan reserved are kept in gangPorts). */
  const newAttempts: AttemptsTable[] = [];
  /**
   * The placements in plan order, each kept until its stage is claimed: a gang's at once (its
   * number is read from its stage's attempts), every other's in one set-based claim after the loop
   * (claimStages). Their machines' room is taken as each is checked, claimed or not: a claim that
   * fails (its stage changed in this transaction) leaves that room unused until the next pass.
   */
  const placed: { claim: StageClaim | null; jobId: string; attempts: { row: AttemptsTable; machine: string; event: EventInput }[] }[] = [];
  /** Stages this plan places: a stage named twice is placed once, the second skipped as when its token had moved. */
  const claimed = new Set<string>();

  // The plan's stages in one read; each is placed at most once, and its write below is still
  // guarded on the state and token read here.
  const stageIds = p.plan.placements.map((x) => x.stageId);
  const stages = new Map((await stagesToPlace.rows(tx.db, stageIds)).map((r) => [r.id, r]));
  for (const pl of p.plan.placements) {
    const members = placementMembers(pl);
    const problem = placementProblem(pl, members, byId);
    if (problem !== null) {
      skipped.push({ stageId: pl.stageId, why: problem });
      continue;
    }
    const stage = stages.get(pl.stageId);
    if (!stage || stage.state !== 'ready') {
      skipped.push({ stageId: pl.stageId, why: 'stage no longer ready' });
      continue;
    }
    if (claimed.has(stage.id)) {
      skipped.push({ stageId: pl.stageId, why: 'stage changed while placing' });
      continue;
    }
    const size = members.length;
    const gang = size > 1;
    // A gang's master port, reserved on rank 0's machine before anything is written: a full range skips the gang whole.
    let masterPort: number | null = null;
    if (gang) {
      const rank0 = rows.get(members[0]!.machineId)!;
      const r = await reserveGangPort(tx.db, rank0, gangPorts);
      if ('full' in r) {
        const why = `gang rank 0 on ${rank0.name}: no free gang port in ${r.full.first}-${r.full.last}`;
        skipped.push({ stageId: pl.stageId, why });
        // Said where status and explain read it: the planner sees room for the gang now, so
        // their live reason is none (docs/gangs.md, "Rendezvous"). Written once, not each pass;
        // the placement that comes clears it.
        await tx.db
          .updateTable('stages')
          .set({ pending_reason: why })
          .where('id', '=', stage.id)
          .where('state', '=', 'ready')
          .where((eb) => eb.or([eb('pending_reason', 'is', null), eb('pending_reason', '!=', why)]))
          .execute();
        continue;
      }
      masterPort = r.port;
    }
    const base = Number(stage.token) + 1;
    const ids = members.map(() => newId('att', tx.now));
    const gangId = gang ? ids[0]! : null;
    if (gang && (await claimOne.affected(tx.db, 'scheduled', base + size - 1, ids[0]!, tx.now, stage.id, base - 1)) !== 1) {
      skipped.push({ stageId: pl.stageId, why: 'stage changed while placing' });
      continue;
    }
    claimed.add(stage.id);
    // Started where it is placed: the report that asked is answered with it, and its agent spawns
    // it with no acknowledgement (docs/throughput.md, "Started at placement").
    const start = !gang && p.startOn?.has(members[0]!.machineId) === true;
    const entry: (typeof placed)[number] = {
      claim: gang ? null : { stageId: stage.id, token: base, attemptId: ids[0]!, was: base - 1, state: start ? 'running' : 'scheduled' },
      jobId: stage.job_id,
      attempts: [],
    };
    placed.push(entry);
    const number = gang ? Number((await highestNumber.first(tx.db, stage.id))?.n ?? 0) + 1 : base;
    for (const [i, mem] of members.entries()) {
      const m = byId.get(mem.machineId)!;
      const one = memberPlacement(pl, mem);
      const token = base + i;
      const gpuType = m.gpus.find((g) => g.index === one.gpuIndices[0])?.type ?? null;
      const row: AttemptsTable = {
        id: ids[i]!,
        stage_id: stage.id,
        job_id: stage.job_id,
        stage_name: stage.name,
        number,
        token,
        machine_id: m.id,
        gpu_indices: JSON.stringify(one.gpuIndices),
        gpu_type: gpuType,
        gpu_milli: one.gpuIndices.length ? (one.gpuMilli ?? GPU_MILLI_WHOLE) : GPU_MILLI_WHOLE,
        gpu_memory_bytes: one.gpuIndices.length ? (one.gpuMemoryBytes ?? null) : null,
        cpu_millis: one.cpuMillis,
        memory_bytes: one.memoryBytes,
        state: start ? 'running' : 'scheduled',
        exit_code: null,
        signal: null,
        reason: null,
        end_kind: null,
        pid: null,
        outputs: null,
        // Until the agent acknowledges, the lease is the acknowledgement deadline's business; one
        // started here runs under it as under an acknowledgement's.
        lease_expires_at: tx.now + p.leaseMs,
        scheduled_at: tx.now,
        started_at: start ? tx.now : null,
        finished_at: null,
        released_at: null,
        log_bytes: 0,
        stdout_bytes: 0,
        stderr_bytes: 0,
        progress: null,
        progress_message: null,
        progress_at: null,
        memory_peak_bytes: null,
        cpu_seconds: null,
        log_cut_bytes: null,
        gang_id: gangId,
        gang_rank: gang ? mem.rank : null,
        gang_size: gang ? size : null,
        gang_master_port: masterPort,
      };
      takeAllocation(m, one);
      const share = one.gpuIndices.length === 1 && one.gpuMilli !== undefined && one.gpuMilli < GPU_MILLI_WHOLE;
      const gpuText = share
        ? ` with ${one.gpuMilli! / GPU_MILLI_WHOLE} of ${gpuType} GPU ${one.gpuIndices[0]}`
        : one.gpuIndices.length
          ? ` with ${gpuType} GPU(s) ${one.gpuIndices.join(',')}`
          : '';
      entry.attempts.push({
        row,
        machine: m.name,
        // One event for both moves where it starts here: `attempt:running`, with the placement's data.
        event: {
          type: start ? 'attempt:running' : 'attempt:scheduled',
          jobId: stage.job_id,
          stageName: stage.name,
          attemptId: row.id,
          machineId: m.id,
          message: `stage ${stage.name} attempt ${number}${rankText(row)} ${start ? 'placed and started' : 'placed'} on ${m.name}${gpuText}`,
          data: {
            ...(start ? { pid: null, startedOnPlacement: true } : {}),
            machine: m.name,
            gpus: one.gpuIndices,
            ...(share ? { gpuMilli: one.gpuMilli } : {}),
            ...(gang ? { gang: { id: gangId, rank: mem.rank, size, masterPort } } : {}),
            waitedMs: tx.now - Number(stage.ready_since ?? tx.now),
            pool: stage.pool,
          },
        },
      });
    }
  }
  const claims = placed.flatMap((e) => e.claim ?? []);
  const ok = claims.length ? await claimStages(tx, claims) : new Set<string>();
  for (const e of placed) {
    if (e.claim && !ok.has(e.claim.stageId)) {
      skipped.push({ stageId: e.claim.stageId, why: 'stage changed while placing' });
      continue;
    }
    for (const a of e.attempts) {
      newAttempts.push(a.row);
      applied.push(toAttempt(a.row, a.machine));
      // A started one goes on the answer of the report that asked, not on a woken heartbeat.
      if (a.row.state !== 'running') wake.add(a.row.machine_id);
      await tx.event(a.event);
    }
    (e.claim?.state === 'running' ? jobsStarted : jobsTouched).add(e.jobId);
  }
  for (let i = 0; i < newAttempts.length; i += ATTEMPTS_PER_INSERT) {
    const part = newAttempts.slice(i, i + ATTEMPTS_PER_INSERT);
    await insertAttempts(part.length).run(tx.db, ...part.flatMap(attemptValues));
  }
  // The jobs' states as read with their stages: placing writes stages and attempts, never a job's row.
  const jobStates = new Map([...stages.values()].map((r) => [r.job_id, r.job_state]));
  await syncJobsOnActivation(
    tx,
    [...jobsTouched].filter((id) => !jobsStarted.has(id)).map((id) => ({ id, state: jobStates.get(id) })),
    'scheduled',
  );
  await syncJobsOnActivation(
    tx,
    [...jobsStarted].map((id) => ({ id, state: jobStates.get(id) })),
    'running',
  );
  for (const machineId of wake) await tx.publish('machine:wake', { machineId });
  const preempted: string[] = [];
  for (const pre of p.plan.preemptions ?? []) for (const v of pre.victims) preempted.push(...(await preemptAttempt(tx, v, pre.reason, p.jitter ?? 0.5)));
  return { applied, skipped, ...(preempted.length ? { preempted } : {}) };
}

/**
 * Stops one attempt for work that outranks it, if it is still the active attempt the plan saw:
 * it becomes `preempted`, its stage goes back to its queue once its grace has passed (charged to
 * no budget) and remembers when, for the cool-down. Its resources stay held until its agent,
 * told on its next heartbeat, has stopped it (TERM, its preemptionGraceSeconds to checkpoint,
 * then KILL): the stage it was stopped for is placed when they free. A gang's member ends its
 * gang (docs/gangs.md, "Preemption"): every other active member preempted with the same grace,
 * the stage requeued and its cool-down set once; the plan lists the other members as victims too,
 * and their turn here finds them ended and does nothing. Returns the attempts it ended.
 */
async function preemptAttempt(tx: TxContext, v: { attemptId: string; token: number; stageId: string }, reason: string, jitter: number): Promise<string[]> {
  const a = await tx.db.selectFrom('attempts').selectAll().where('id', '=', v.attemptId).executeTakeFirst();
  if (!a || Number(a.token) !== v.token || !isAttemptActive(a.state)) return [];
  const stage = await tx.db.selectFrom('stages').select(['definition', 'preemptible']).where('id', '=', a.stage_id).executeTakeFirst();
  if (!stage || Number(stage.preemptible) !== 1) return [];
  if (!(await endActiveAttempt(tx, a, 'preempted', reason))) return [];
  await tx.db.updateTable('stages').set({ preempted_at: tx.now }).where('id', '=', a.stage_id).execute();
  const graceMs = preemptionGraceMs(JSON.parse(stage.definition) as StageDefinition);
  await tx.event({
    type: 'attempt:preempted',
    jobId: a.job_id,
    stageName: a.stage_name,
    attemptId: a.id,
    machineId: a.machine_id,
    message: `stage ${a.stage_name} attempt ${a.number}${rankText(a)} ${reason}; ${graceMs / 1000} s to checkpoint`,
    data: { graceMs, end: AttemptEndKind.preempted },
  });
  await tx.publish('machine:wake', { machineId: a.machine_id });
  const peers = await endGang(tx, a, reason, { graceMs });
  await applyOutcome(tx, {
    jobId: a.job_id,
    stageId: a.stage_id,
    attemptId: stageAttemptId(a),
    outcome: { kind: 'preempted', reason, notBefore: tx.now + graceMs },
    jitter,
  });
  return [a.id, ...peers];
}

/**
 * A ready stage's place in its shape's queue, in the order queueHeads reads it (priority, then the
 * job's submission, then the job, then readiness). Counts the index range ahead of it: for a person
 * asking (explain), not for a pass.
 */
export async function stageQueuePosition(db: Db, stageId: string): Promise<{ ahead: number; waiting: number } | null> {
  const s = await db
    .selectFrom('stages')
    .select(['state', 'shape', 'priority', 'created_at', 'job_id', 'ready_since'])
    .where('id', '=', stageId)
    .executeTakeFirst();
  if (!s || s.state !== 'ready' || s.shape === null) return null;
  const inQueue = db.selectFrom('stages').where('state', '=', QUEUE_STATE).where('shape', '=', s.shape);
  const ahead = await inQueue
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where((eb) =>
      eb.or([
        eb('priority', '>', s.priority),
        eb.and([
          eb('priority', '=', s.priority),
          eb.or([
            eb('created_at', '<', s.created_at),
            eb.and([
              eb('created_at', '=', s.created_at),
              eb.or([eb('job_id', '<', s.job_id), eb.and([eb('job_id', '=', s.job_id), eb('ready_since', '<', s.ready_since ?? 0)])]),
            ]),
          ]),
        ]),
      ]),
    )
    .executeTakeFirstOrThrow();
  const waiting = await inQueue.select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
  return { ahead: Number(ahead.n), waiting: Number(waiting.n) };
}

/**
 * Ready stages by pool and shape, with the oldest readiness of each: what /metrics and the pools'
 * history report of the queues. Counted by shape alone, from the queue index (stages_ready holds
 * each ready stage's shape and readiness: nothing else is read); a shape's key includes its pool
 * (stageShape), so one stage of each shape names it. Grouping by pool as well read every ready
 * stage's row: 75 ms with 100,000 waiting (the pools' history samples every 15 s), against 8 ms.
 */
export async function queueStats(db: Db): Promise<{ pool: string; shape: string; ready: number; oldestReadySince: number }[]> {
  const rows = await db
    .selectFrom('stages')
    .select((eb) => ['shape', eb.fn.countAll<number>().as('n'), eb.fn.min('ready_since').as('oldest')])
    .where('state', '=', QUEUE_STATE)
    .groupBy('shape')
    .execute();
  const out: { pool: string; shape: string; ready: number; oldestReadySince: number }[] = [];
  for (const r of rows) {
    const one = await db
      .selectFrom('stages')
      .select('pool')
      .where('state', '=', QUEUE_STATE)
      .where((eb) => (r.shape === null ? eb('shape', 'is', null) : eb('shape', '=', r.shape)))
      .limit(1)
      .executeTakeFirst();
    if (one) out.push({ pool: one.pool, shape: r.shape ?? '', ready: Number(r.n), oldestReadySince: Number(r.oldest ?? 0) });
  }
  return out;
}
