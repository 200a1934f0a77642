import { type Kysely, type Migration, sql } from 'kysely';

/*
 * Frozen (docs/store-contract.md, "Migrations"): this file imports nothing of Gantry's, so that
 * what it builds never changes after it shipped. The state lists are the ones it shipped with
 * (commit 027ca35), as literals: the domain's lists may grow or shrink later, and a new migration
 * then moves the constraint. `machines.health` still admitted 'draining' and 'cordoned' here;
 * 0018_converge_schema narrows it to what 0005 left.
 */
const JOB_STATES = ['submitted', 'queued', 'scheduled', 'running', 'succeeded', 'failed', 'canceled'];
const STAGE_STATES = ['pending', 'ready', 'scheduled', 'running', 'succeeded', 'failed', 'canceled', 'skipped'];
const MACHINE_HEALTHS = ['ready', 'draining', 'suspect', 'lost', 'cordoned'];
const ATTEMPT_STATES = ['scheduled', 'running', 'succeeded', 'failed', 'lost', 'preempted', 'canceled'];

/** A check that a column holds one of `values`, written as literals (DDL takes no parameters). */
function oneOf(column: string, values: readonly string[]) {
  return sql`${sql.ref(column)} in (${sql.join(values.map((v) => sql.lit(v)))})`;
}

/**
 * The core tables. The state columns carry check constraints, so the database refuses a state the
 * code does not know. The only dialect difference, how an auto-incrementing key is spelled, is
 * the `dialect` argument.
 */
export function migration0001Core(dialect: 'sqlite' | 'postgres'): Migration {
  const autoKey = dialect === 'postgres' ? ('bigserial' as const) : ('integer' as const);
  return {
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
        .addColumn('state', 'text', (c) => c.notNull().check(oneOf('state', JOB_STATES)))
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
        .addColumn('state', 'text', (c) => c.notNull().check(oneOf('state', STAGE_STATES)))
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
      await db.schema.createIndex('stages_queue').on('stages').columns(['state', 'pool', 'priority', 'ready_since']).execute();
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
        .addColumn('health', 'text', (c) => c.notNull().check(oneOf('health', MACHINE_HEALTHS)))
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
        .addColumn('state', 'text', (c) => c.notNull().check(oneOf('state', ATTEMPT_STATES)))
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
        .addColumn('seq', autoKey, (c) => (dialect === 'postgres' ? c.primaryKey() : c.primaryKey().autoIncrement()))
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
        .addColumn('id', autoKey, (c) => (dialect === 'postgres' ? c.primaryKey() : c.primaryKey().autoIncrement()))
        .addColumn('topic', 'text', (c) => c.notNull())
        .addColumn('payload', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('published_at', 'bigint')
        .execute();
      await db.schema.createIndex('outbox_unpublished').on('outbox').columns(['published_at', 'id']).execute();

      await db.schema
        .createTable('log_chunks')
        .addColumn('id', autoKey, (c) => (dialect === 'postgres' ? c.primaryKey() : c.primaryKey().autoIncrement()))
        .addColumn('attempt_id', 'text', (c) => c.notNull())
        .addColumn('stream', 'text', (c) => c.notNull())
        .addColumn('at', 'bigint', (c) => c.notNull())
        .addColumn('data', 'text', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('log_chunks_attempt').on('log_chunks').columns(['attempt_id', 'id']).execute();
    },
  };
}
