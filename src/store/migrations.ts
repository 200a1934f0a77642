import { randomBytes } from 'node:crypto';
import { type Kysely, type Migration, type MigrationProvider, sql } from 'kysely';
import { attemptStates } from '../domain/attempt-state.js';
import { jobStates } from '../domain/job-state.js';
import { machineHealths } from '../domain/machine-health.js';
import { machineSchedulings } from '../domain/machine-scheduling.js';
import { stageStates } from '../domain/stage-state.js';
import { tokenKinds } from '../domain/token-kind.js';
import type { Placement, Resources } from '../domain/resources.js';
import { stageShape } from '../domain/stage-shape.js';
import type { StoreCapabilities } from './store-capabilities.js';
import { migration0014 } from './rerun-outputs-migration.js';

/**
 * One list of migrations for every adapter. The only dialect difference, how an auto-incrementing
 * key is spelled, comes from the adapter's capabilities. The state columns carry check
 * constraints built from the domain's state lists, so the database refuses a state the code
 * does not know.
 */
function oneOf(column: string, values: readonly string[]) {
  return sql`${sql.ref(column)} in (${sql.join(values.map((v) => sql.lit(v)))})`;
}

export function migrations(caps: StoreCapabilities): Record<string, Migration> {
  const autoKey = caps.dialect === 'postgres' ? ('bigserial' as const) : ('integer' as const);
  return {
    '0001_core': {
      async up(db: Kysely<any>) {
        await db.schema
          .createTable('teams')
          .addColumn('name', 'text', (c) => c.primaryKey())
          .addColumn('weight', 'real', (c) => c.notNull().defaultTo(1))
          .addColumn('created_at', 'bigint', (c) => c.notNull())
          .execute();

        await db.schema
          .createTable('jobs')
          .addColumn('id', 'text', (c) => c.primaryKey())
          .addColumn('name', 'text', (c) => c.notNull())
          .addColumn('team', 'text', (c) => c.notNull().references('teams.name'))
          .addColumn('priority', 'integer', (c) => c.notNull())
          .addColumn('labels', 'text', (c) => c.notNull())
          .addColumn('state', 'text', (c) => c.notNull().check(oneOf('state', jobStates)))
          .addColumn('definition', 'text', (c) => c.notNull())
          .addColumn('source', 'text')
          .addColumn('failure_reason', 'text')
          .addColumn('cancel_requested_at', 'bigint')
          .addColumn('created_at', 'bigint', (c) => c.notNull())
          .addColumn('updated_at', 'bigint', (c) => c.notNull())
          .addColumn('finished_at', 'bigint')
          .execute();
        await db.schema.createIndex('jobs_state_created').on('jobs').columns(['state', 'created_at']).execute();
        await db.schema.createIndex('jobs_created').on('jobs').columns(['created_at']).execute();

        await db.schema
          .createTable('stages')
          .addColumn('id', 'text', (c) => c.primaryKey())
          .addColumn('job_id', 'text', (c) => c.notNull().references('jobs.id'))
          .addColumn('name', 'text', (c) => c.notNull())
          .addColumn('position', 'integer', (c) => c.notNull())
          .addColumn('pool', 'text', (c) => c.notNull())
          .addColumn('state', 'text', (c) => c.notNull().check(oneOf('state', stageStates)))
          .addColumn('priority', 'integer', (c) => c.notNull())
          .addColumn('definition', 'text', (c) => c.notNull())
          .addColumn('attempts_used', 'integer', (c) => c.notNull().defaultTo(0))
          .addColumn('lost_used', 'integer', (c) => c.notNull().defaultTo(0))
          .addColumn('token', 'integer', (c) => c.notNull().defaultTo(0))
          .addColumn('current_attempt_id', 'text')
          .addColumn('output_attempt_id', 'text')
          .addColumn('ready_since', 'bigint')
          .addColumn('not_before', 'bigint')
          .addColumn('pending_reason', 'text')
          .addColumn('end_reason', 'text')
          .addColumn('created_at', 'bigint', (c) => c.notNull())
          .addColumn('updated_at', 'bigint', (c) => c.notNull())
          .addColumn('finished_at', 'bigint')
          .addUniqueConstraint('stages_job_name', ['job_id', 'name'])
          .execute();
        // The scheduler's queue: ready stages of one pool, highest priority first, oldest first.
        await db.schema
          .createIndex('stages_queue')
          .on('stages')
          .columns(['state', 'pool', 'priority', 'ready_since'])
          .execute();
        await db.schema.createIndex('stages_job').on('stages').columns(['job_id']).execute();

        await db.schema
          .createTable('machines')
          .addColumn('id', 'text', (c) => c.primaryKey())
          .addColumn('name', 'text', (c) => c.notNull().unique())
          .addColumn('cpu_millis', 'bigint', (c) => c.notNull())
          .addColumn('memory_bytes', 'bigint', (c) => c.notNull())
          .addColumn('gpus', 'text', (c) => c.notNull())
          .addColumn('gpus_declared', 'integer', (c) => c.notNull())
          .addColumn('region', 'text')
          .addColumn('labels', 'text', (c) => c.notNull())
          .addColumn('health', 'text', (c) => c.notNull().check(oneOf('health', machineHealths)))
          .addColumn('agent', 'text', (c) => c.notNull())
          .addColumn('last_heartbeat_at', 'bigint', (c) => c.notNull())
          .addColumn('registered_at', 'bigint', (c) => c.notNull())
          .addColumn('updated_at', 'bigint', (c) => c.notNull())
          .execute();

        await db.schema
          .createTable('attempts')
          .addColumn('id', 'text', (c) => c.primaryKey())
          .addColumn('stage_id', 'text', (c) => c.notNull().references('stages.id'))
          .addColumn('job_id', 'text', (c) => c.notNull())
          .addColumn('stage_name', 'text', (c) => c.notNull())
          .addColumn('number', 'integer', (c) => c.notNull())
          .addColumn('token', 'integer', (c) => c.notNull())
          .addColumn('machine_id', 'text', (c) => c.notNull().references('machines.id'))
          .addColumn('gpu_indices', 'text', (c) => c.notNull())
          .addColumn('gpu_type', 'text')
          .addColumn('cpu_millis', 'bigint', (c) => c.notNull())
          .addColumn('memory_bytes', 'bigint', (c) => c.notNull())
          .addColumn('state', 'text', (c) => c.notNull().check(oneOf('state', attemptStates)))
          .addColumn('exit_code', 'integer')
          .addColumn('signal', 'text')
          .addColumn('reason', 'text')
          .addColumn('pid', 'integer')
          .addColumn('outputs', 'text')
          .addColumn('lease_expires_at', 'bigint')
          .addColumn('scheduled_at', 'bigint', (c) => c.notNull())
          .addColumn('started_at', 'bigint')
          .addColumn('finished_at', 'bigint')
          // When the attempt's process was known to be gone; until then it holds its resources.
          .addColumn('released_at', 'bigint')
          .addUniqueConstraint('attempts_stage_token', ['stage_id', 'token'])
          .execute();
        await db.schema.createIndex('attempts_machine_state').on('attempts').columns(['machine_id', 'state']).execute();
        await db.schema.createIndex('attempts_machine_held').on('attempts').columns(['machine_id', 'released_at']).execute();
        await db.schema.createIndex('attempts_stage').on('attempts').columns(['stage_id']).execute();
        await db.schema.createIndex('attempts_state_lease').on('attempts').columns(['state', 'lease_expires_at']).execute();

        await db.schema
          .createTable('events')
          .addColumn('seq', autoKey, (c) => (caps.dialect === 'postgres' ? c.primaryKey() : c.primaryKey().autoIncrement()))
          .addColumn('at', 'bigint', (c) => c.notNull())
          .addColumn('type', 'text', (c) => c.notNull())
          .addColumn('job_id', 'text')
          .addColumn('stage_name', 'text')
          .addColumn('attempt_id', 'text')
          .addColumn('machine_id', 'text')
          .addColumn('message', 'text', (c) => c.notNull())
          .addColumn('data', 'text', (c) => c.notNull())
          .execute();
        await db.schema.createIndex('events_job').on('events').columns(['job_id', 'seq']).execute();

        await db.schema
          .createTable('outbox')
          .addColumn('id', autoKey, (c) => (caps.dialect === 'postgres' ? c.primaryKey() : c.primaryKey().autoIncrement()))
          .addColumn('topic', 'text', (c) => c.notNull())
          .addColumn('payload', 'text', (c) => c.notNull())
          .addColumn('created_at', 'bigint', (c) => c.notNull())
          .addColumn('published_at', 'bigint')
          .execute();
        await db.schema.createIndex('outbox_unpublished').on('outbox').columns(['published_at', 'id']).execute();

        await db.schema
          .createTable('log_chunks')
          .addColumn('id', autoKey, (c) => (caps.dialect === 'postgres' ? c.primaryKey() : c.primaryKey().autoIncrement()))
          .addColumn('attempt_id', 'text', (c) => c.notNull())
          .addColumn('stream', 'text', (c) => c.notNull())
          .addColumn('at', 'bigint', (c) => c.notNull())
          .addColumn('data', 'text', (c) => c.notNull())
          .execute();
        await db.schema.createIndex('log_chunks_attempt').on('log_chunks').columns(['attempt_id', 'id']).execute();
      },
    },
    '0002_queue_parking_indexes': migration0002(),
    '0003_stage_shapes': migration0003(),
    '0004_idempotency_keys': {
      // A submit's Idempotency-Key, kept at least a day (the reconciler prunes older ones).
      async up(db: Kysely<any>) {
        await db.schema
          .createTable('idempotency_keys')
          .addColumn('key', 'text', (c) => c.primaryKey())
          .addColumn('request_hash', 'text', (c) => c.notNull())
          .addColumn('job_ids', 'text', (c) => c.notNull())
          .addColumn('created_at', 'bigint', (c) => c.notNull())
          .execute();
        await db.schema.createIndex('idempotency_keys_created').on('idempotency_keys').columns(['created_at']).execute();
      },
    },
    '0005_machine_scheduling': migration0005(),
    '0006_log_offsets': {
      // Logs delivered at least once, stored exactly once: each piece carries its byte offset in
      // its stream's file; the attempt keeps how far each stream has come, and the unique index
      // makes a second copy of a piece impossible whatever the caller checked.
      async up(db: Kysely<any>) {
        await db.schema.alterTable('log_chunks').addColumn('byte_offset', 'bigint').execute();
        await db.schema.alterTable('attempts').addColumn('stdout_bytes', 'bigint', (c) => c.notNull().defaultTo(0)).execute();
        await db.schema.alterTable('attempts').addColumn('stderr_bytes', 'bigint', (c) => c.notNull().defaultTo(0)).execute();
        await db.schema.createIndex('log_chunks_piece').on('log_chunks').columns(['attempt_id', 'stream', 'byte_offset']).unique().execute();
      },
    },
    '0007_stage_indexes': {
      // Every index is rewritten by the writes that change its columns: a stage changes state four
      // or five times, and each change re-keyed stages_queue, which no query has read since queues
      // by shape (0003). stages_job becomes (job_id, position): a job's stages are read in
      // position order several times per stage's life, and were sorted each time. (An index leading
      // with job_id must stay beside the unique (job_id, name): without one, SQLite's planner, which
      // has no statistics here, reads `job_id = ? and state = ?` from stages_state_shape.)
      async up(db: Kysely<any>) {
        await db.schema.dropIndex('stages_queue').execute();
        await db.schema.dropIndex('stages_job').execute();
        await db.schema.createIndex('stages_job').on('stages').columns(['job_id', 'position']).execute();
      },
    },
    '0008_tokens': {
      // API tokens (docs/security.md): only a hash of each is kept, so a copy of the database
      // lets nobody in. A machine credential names its machine; a team token its team.
      async up(db: Kysely<any>) {
        await db.schema
          .createTable('tokens')
          .addColumn('id', 'text', (c) => c.primaryKey())
          .addColumn('kind', 'text', (c) => c.notNull().check(oneOf('kind', tokenKinds)))
          .addColumn('team', 'text', (c) => c.references('teams.name'))
          .addColumn('machine_id', 'text', (c) => c.references('machines.id'))
          .addColumn('name', 'text', (c) => c.notNull())
          .addColumn('hash', 'text', (c) => c.notNull().unique())
          .addColumn('created_at', 'bigint', (c) => c.notNull())
          .addColumn('expires_at', 'bigint')
          .addColumn('revoked_at', 'bigint')
          .execute();
        await sql`create index tokens_machine on tokens (machine_id) where machine_id is not null`.execute(db);
      },
    },
    '0009_audit': {
      // Every change a person asked for (docs/security.md): who, what, when, and how it went. A
      // change's row is written in the change's own transaction; a refused request's on its own.
      async up(db: Kysely<any>) {
        await db.schema
          .createTable('audit')
          .addColumn('seq', autoKey, (c) => (caps.dialect === 'postgres' ? c.primaryKey() : c.primaryKey().autoIncrement()))
          .addColumn('at', 'bigint', (c) => c.notNull())
          .addColumn('token_id', 'text')
          .addColumn('actor', 'text', (c) => c.notNull())
          .addColumn('action', 'text', (c) => c.notNull())
          .addColumn('target', 'text')
          .addColumn('result', 'text', (c) => c.notNull())
          .execute();
        await db.schema.createIndex('audit_at').on('audit').columns(['at']).execute();
      },
    },
    '0010_leader': {
      // The leader lease of the replicas (docs/replicas.md): one row, taken over when it expires,
      // its term counting the holders, so that a deposed leader's late write is refused.
      async up(db: Kysely<any>) {
        await db.schema
          .createTable('leader')
          .addColumn('name', 'text', (c) => c.primaryKey())
          .addColumn('holder', 'text')
          .addColumn('term', 'bigint', (c) => c.notNull())
          .addColumn('expires_at', 'bigint', (c) => c.notNull())
          .execute();
        await db.insertInto('leader').values({ name: 'control', holder: null, term: 0, expires_at: 0 }).execute();
        // This database's own name, made once: messages on a bus shared with other installations
        // carry it, so theirs never wake ours and outbox ids (which restart with a new database)
        // never collide in the bus's de-duplication.
        await db.schema.createTable('installation').addColumn('id', 'text', (c) => c.primaryKey()).execute();
        await db.insertInto('installation').values({ id: randomBytes(8).toString('hex') }).execute();
      },
    },
    '0011_queue_timeout': {
      // A stage's queueTimeoutSeconds, in ms, beside its row: the reconciler finds the ready stages
      // past it through a partial index that holds only stages that set one.
      async up(db: Kysely<any>) {
        await db.schema.alterTable('stages').addColumn('queue_timeout_ms', 'bigint').execute();
        await sql`create index stages_queue_timeout on stages (state, ready_since) where queue_timeout_ms is not null`.execute(db);
      },
    },
    '0012_teams_preemption': migration0012(),
    '0013_progress': {
      // What a running stage says of its progress, forwarded by its agent with heartbeats.
      async up(db: Kysely<any>) {
        await db.schema.alterTable('attempts').addColumn('progress', 'real').execute();
        await db.schema.alterTable('attempts').addColumn('progress_message', 'text').execute();
        await db.schema.alterTable('attempts').addColumn('progress_at', 'bigint').execute();
      },
    },
    '0014_rerun_outputs': migration0014(),
    '0015_write_only_indexes': {
      // Indexes that every stage rewrites and no query needs: each is a b-tree written on the
      // attempt's insert and moved at each of its state changes (docs/throughput.md). A stage's
      // attempts are found through the unique (stage_id, token); a machine's active ones through
      // attempts_held (active implies not yet released); ended jobs for retention through
      // jobs_state_created's state, as they were through this one's.
      async up(db: Kysely<any>) {
        await db.schema.dropIndex('attempts_stage').execute();
        await db.schema.dropIndex('attempts_machine_state').execute();
        await db.schema.dropIndex('jobs_state_updated').execute();
      },
    },
    '0016_ready_queue_index': {
      // The queue index holds the queue only. stages_state_shape keyed every stage by its state,
      // so each of a stage's four or five state changes moved its entry, and the index held every
      // stage that ever ran: 7 of the 36 pages an agent's report wrote (docs/throughput.md). Its
      // readers all ask for ready stages; with `where state = 'ready'` an entry is written when a
      // stage becomes ready and removed when it is placed, and a running or ended stage costs the
      // index nothing. Its readers must say `state = 'ready'` in the SQL text (QUEUE_STATE in
      // scheduler-verbs.ts), not as a bound value: only then may a planner use a partial index.
      async up(db: Kysely<any>) {
        await db.schema.dropIndex('stages_state_shape').execute();
        await sql`create index stages_ready on stages (shape, priority desc, created_at, job_id, ready_since) where state = 'ready'`.execute(db);
      },
    },
    '0017_attempt_end': {
      // How an attempt ended, typed (issue 26): the advancer decides retries by this kind, never by
      // the reason's wording. Self-contained: the kinds are written out here as they were when this
      // shipped (a later kind is a later migration), not read from the domain's list, which moves.
      // Rows that ended before it keep null: their kind was never recorded, only their text.
      async up(db: Kysely<any>) {
        await sql`alter table attempts add column end_kind text check (end_kind in (
          'exited', 'signaled', 'timeout', 'spawn-failed', 'inputs-failed', 'outputs-failed', 'killed', 'oom-killed', 'lost', 'preempted'
        ))`.execute(db);
      },
    },
  };
}

/**
 * Teams get a quota and an update time; stages say whether they are preemptible and when they
 * were last preempted. A stage's shape now holds its team and preemptibility (stageShape): open
 * stages get theirs again, so a team's stages form queues of their own (a time limit, which
 * backfill reads, is part of it too).
 */
function migration0012(): Migration {
  return {
    async up(db: Kysely<any>) {
      await db.schema.alterTable('teams').addColumn('quota', 'text').execute();
      await db.schema.alterTable('teams').addColumn('updated_at', 'bigint').execute();
      await db.schema.alterTable('stages').addColumn('preemptible', 'integer', (c) => c.notNull().defaultTo(0)).execute();
      await db.schema.alterTable('stages').addColumn('preempted_at', 'bigint').execute();
      const open = await db
        .selectFrom('stages')
        .innerJoin('jobs', 'jobs.id', 'stages.job_id')
        .select(['stages.id', 'stages.definition', 'jobs.team'])
        .where('stages.state', 'in', ['pending', 'ready', 'scheduled', 'running'])
        .execute();
      for (const r of open) {
        const def = JSON.parse(r.definition) as { resources: Resources; placement: Placement; preemptible?: boolean; timeoutSeconds?: number | null };
        const preemptible = def.preemptible === true;
        await db
          .updateTable('stages')
          .set({ shape: stageShape(def.resources, def.placement, { team: r.team, preemptible, timeoutSeconds: def.timeoutSeconds ?? null }), preemptible: preemptible ? 1 : 0 })
          .where('id', '=', r.id)
          .execute();
      }
    },
  };
}

/**
 * Indexes for the queries the passes really run (found by reading their plans); parking: a ready
 * stage no machine could run waits out of the queue's head until the cluster changes, so a wall
 * of unplaceable stages cannot hide placeable ones behind it; and a per-attempt log byte count.
 */
function migration0002(): Migration {
  return {
    async up(db: Kysely<any>) {
      await db.schema.alterTable('stages').addColumn('parked_at', 'bigint').execute();
      await db.schema.alterTable('attempts').addColumn('log_bytes', 'bigint', (c) => c.notNull().defaultTo(0)).execute();
      await db.schema.dropIndex('stages_queue').execute();
      // Priority descending as the scheduler reads it, so a pass reads the head without sorting.
      await sql`create index stages_queue on stages (state, pool, priority desc, ready_since)`.execute(db);
      // What machines hold: attempts not yet released, a small set however long the history.
      await db.schema.dropIndex('attempts_machine_held').execute();
      await sql`create index attempts_held on attempts (machine_id) where released_at is null`.execute(db);
      await db.schema.createIndex('attempts_job').on('attempts').columns(['job_id']).execute();
      await db.schema.createIndex('jobs_state_updated').on('jobs').columns(['state', 'updated_at']).execute();
      await db.schema.createIndex('machines_updated').on('machines').columns(['updated_at']).execute();
    },
  };
}

/**
 * Queues by shape (src/domain/stage-shape.ts): the scheduler reads each shape's ready stages only
 * as deep as free room allows, and finds the shapes that have ready stages by walking a partial
 * index, so a pass costs what it places, not what waits. `parked_at` (0002) is no longer used:
 * a shape no machine can run is never read at all.
 */
function migration0003(): Migration {
  return {
    async up(db: Kysely<any>) {
      await db.schema.alterTable('stages').addColumn('shape', 'text').execute();
      // Stages that may still be queued get their shape; ended ones never need it.
      const open = await db.selectFrom('stages').select(['id', 'definition']).where('state', 'in', ['pending', 'ready', 'scheduled', 'running']).execute();
      for (const r of open) {
        const def = JSON.parse(r.definition) as { resources: Resources; placement: Placement };
        await db.updateTable('stages').set({ shape: stageShape(def.resources, def.placement) }).where('id', '=', r.id).execute();
      }
      // State first, then shape: `min(shape) … where state = 'ready' and shape > ?` is one seek in
      // it (a partial index `where state = 'ready'` was not chosen for that by SQLite's planner),
      // and a shape's queue is read in order from it.
      await sql`create index stages_state_shape on stages (state, shape, priority desc, created_at, job_id, ready_since)`.execute(db);
    },
  };
}

/**
 * What an operator wants of a machine (eligible, cordoned, draining, removed) gets its own column,
 * apart from its health (ready, suspect, lost), which heartbeats and the reconciler own: until
 * now `health` held both, so a draining machine that missed a heartbeat came back `ready`, and a
 * cordoned one that died was never found lost. A machine that was cordoned or draining keeps that
 * here, and its health restarts at `ready`: the reconciler judges its silence as any other's.
 * (`health`'s check constraint, built in 0001, still admits the two old values on databases made
 * before this; nothing writes them any more.)
 */
function migration0005(): Migration {
  return {
    async up(db: Kysely<any>) {
      await db.schema
        .alterTable('machines')
        .addColumn('scheduling', 'text', (c) => c.notNull().defaultTo('eligible').check(oneOf('scheduling', machineSchedulings)))
        .execute();
      await db
        .updateTable('machines')
        .set((eb) => ({ scheduling: eb.ref('health'), health: 'ready' }))
        .where('health', 'in', ['cordoned', 'draining'])
        .execute();
    },
  };
}

export function migrationProvider(caps: StoreCapabilities): MigrationProvider {
  return { getMigrations: async () => migrations(caps) };
}
