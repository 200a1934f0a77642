import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import SQLite from 'better-sqlite3';
import { Kysely, Migrator, PostgresDialect, sql, SqliteDialect } from 'kysely';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { freshSchema, POSTGRES_URL, serviceMissing } from '../../test/support/services.js';
import { postgresSchema, sqliteSchema } from '../../test/support/schema-dump.js';
import { attemptStates } from '../domain/attempt-state.js';
import { jobStates } from '../domain/job-state.js';
import { machineHealths } from '../domain/machine-health.js';
import { machineLifecycles } from '../autoscale/machine-lifecycle.js';
import { machineSchedulings } from '../domain/machine-scheduling.js';
import { stageStates } from '../domain/stage-state.js';
import { tokenKinds } from '../domain/token-kind.js';
import { migrations } from './migrations.js';
import type { StoreCapabilities } from './store-capabilities.js';

/**
 * Migrations are frozen (docs/store-contract.md, "Migrations"): a database made fresh and one
 * upgraded step by step from 0001, with rows in it from an early step so that the back-fills run
 * over data, must end with one schema, and that schema must be the committed snapshot in
 * test/fixtures/schema/. A change to a shipped migration, or to anything it depends on, shows up
 * here. To change the schema on purpose, add a migration and rewrite the snapshot:
 * `GANTRY_UPDATE_SCHEMA_SNAPSHOT=1 npx vitest run src/store/migrations.test.ts`.
 */
const here = dirname(fileURLToPath(import.meta.url));
const snapshotDir = join(here, '../../test/fixtures/schema');
const migrationDir = join(here, 'migrations');

const SQLITE: StoreCapabilities = { dialect: 'sqlite', skipLocked: false, singleWriter: true };
const POSTGRES: StoreCapabilities = { dialect: 'postgres', skipLocked: true, singleWriter: false };

/** The step after which the early rows go in: before 0003's shapes, 0005's move, 0012's shapes, 0014's manifests and 0018's rebuild. */
const EARLY_STEP = '0002_queue_parking_indexes';

function checkSnapshot(dialect: string, schema: string): void {
  const file = join(snapshotDir, `${dialect}.txt`);
  if (process.env.GANTRY_UPDATE_SCHEMA_SNAPSHOT === '1') {
    mkdirSync(snapshotDir, { recursive: true });
    writeFileSync(file, schema);
    return;
  }
  expect(existsSync(file), `${file} is missing: GANTRY_UPDATE_SCHEMA_SNAPSHOT=1 writes it`).toBe(true);
  expect(
    schema,
    `the fresh ${dialect} schema differs from ${file}: a shipped migration or what it imports changed, or a new one needs GANTRY_UPDATE_SCHEMA_SNAPSHOT=1`,
  ).toBe(readFileSync(file, 'utf8'));
}

/** Rows as an 0002-era database held them: a cordoned machine, a running job with an open GPU stage, a committed output. */
async function insertEarlyRows(db: Kysely<any>): Promise<void> {
  const t = 1_700_000_000_000;
  await db.insertInto('teams').values({ name: 'default', weight: 1, created_at: t }).execute();
  const machine = {
    cpu_millis: 8000,
    memory_bytes: 1 << 30,
    gpus: '[]',
    gpus_declared: 0,
    region: null,
    labels: '{}',
    agent: '{}',
    last_heartbeat_at: t,
    registered_at: t,
    updated_at: t,
  };
  await db
    .insertInto('machines')
    .values([
      { id: 'm_1', name: 'one', health: 'cordoned', ...machine },
      { id: 'm_2', name: 'two', health: 'ready', ...machine },
    ])
    .execute();
  const stageDef = (name: string, gpu: { count: number; types: string[] } | null) =>
    JSON.stringify({
      name,
      command: ['true'],
      resources: { cpuMillis: 1000, memoryBytes: 1 << 20, gpu },
      placement: { region: null, labels: { zone: 'a' } },
      timeoutSeconds: 60,
    });
  await db
    .insertInto('jobs')
    .values({
      id: 'job_1',
      name: 'old',
      team: 'default',
      priority: 50,
      labels: '{}',
      state: 'running',
      definition: '{}',
      source: null,
      created_at: t,
      updated_at: t,
    })
    .execute();
  const stage = { job_id: 'job_1', pool: 'cpu', priority: 50, created_at: t, updated_at: t };
  // One row a statement: a multi-row insert fills a missing column with null on SQLite, not its default.
  await db
    .insertInto('stages')
    .values({
      id: 'stg_a',
      name: 'a',
      position: 0,
      state: 'succeeded',
      definition: stageDef('a', null),
      token: 1,
      output_attempt_id: 'att_a',
      finished_at: t,
      ...stage,
    })
    .execute();
  await db
    .insertInto('stages')
    .values({ id: 'stg_b', name: 'b', position: 1, state: 'ready', definition: stageDef('b', { count: 1, types: ['H100'] }), ready_since: t, ...stage })
    .execute();
  await db
    .insertInto('attempts')
    .values({
      id: 'att_a',
      stage_id: 'stg_a',
      job_id: 'job_1',
      stage_name: 'a',
      number: 1,
      token: 1,
      machine_id: 'm_1',
      gpu_indices: '[]',
      cpu_millis: 1000,
      memory_bytes: 1 << 20,
      state: 'succeeded',
      exit_code: 0,
      outputs: JSON.stringify([{ path: 'model.bin', size: 9 }]),
      scheduled_at: t,
      started_at: t,
      finished_at: t,
      released_at: t,
    })
    .execute();
}

/** What the upgrade must have kept of the early rows (0005's move, 0014's manifest, 0018's rebuild of machines, 0024's whole GPUs). */
async function expectEarlyRowsKept(db: Kysely<any>): Promise<void> {
  const machines = await db.selectFrom('machines').select(['id', 'health', 'scheduling']).orderBy('id').execute();
  expect(machines).toEqual([
    { id: 'm_1', health: 'ready', scheduling: 'cordoned' },
    { id: 'm_2', health: 'ready', scheduling: 'eligible' },
  ]);
  expect(await db.selectFrom('attempts').select(['id', 'machine_id']).execute()).toEqual([{ id: 'att_a', machine_id: 'm_1' }]);
  // 0024: an attempt from before shares of a GPU held its GPUs whole, and no GPU memory apart.
  const held = await db.selectFrom('attempts').select(['gpu_milli', 'gpu_memory_bytes']).executeTakeFirstOrThrow();
  expect([Number(held.gpu_milli), held.gpu_memory_bytes]).toEqual([1000, null]);
  expect(await db.selectFrom('output_files').select(['stage_id', 'path', 'blob']).execute()).toEqual([
    { stage_id: 'stg_a', path: 'model.bin', blob: 'legacy:att_a/model.bin' },
  ]);
  const open = await db.selectFrom('stages').select(['shape']).where('id', '=', 'stg_b').executeTakeFirstOrThrow();
  expect(open.shape).toMatch(/^sh_/);
}

/**
 * Idempotency-Keys as a 0019-era database held them, one key for any caller: one for the early job
 * (team default), a batch's over two teams, and one whose job is gone.
 */
async function insertUnscopedKeys(db: Kysely<any>): Promise<void> {
  const t = 1_700_000_000_000;
  await db.insertInto('teams').values({ name: 'other', weight: 1, created_at: t }).execute();
  const job = { name: 'x', priority: 50, labels: '{}', state: 'succeeded', definition: '{}', source: null, created_at: t, updated_at: t };
  await db
    .insertInto('jobs')
    .values({ id: 'job_2', team: 'other', ...job })
    .execute();
  const key = { request_hash: 'h', created_at: t };
  await db
    .insertInto('idempotency_keys')
    .values([
      { key: 'one', job_ids: '["job_1"]', ...key },
      { key: 'mixed', job_ids: '["job_1","job_2"]', ...key },
      { key: 'gone', job_ids: '["job_gone"]', ...key },
    ])
    .execute();
}

/** 0020: a key made by one team's jobs is that team's; one of several teams' or of gone jobs is nobody's. */
async function expectKeysScoped(db: Kysely<any>): Promise<void> {
  expect(await db.selectFrom('idempotency_keys').select(['scope', 'key']).orderBy('key').execute()).toEqual([
    { scope: 'legacy:', key: 'gone' },
    { scope: 'legacy:', key: 'mixed' },
    { scope: 'team:default', key: 'one' },
  ]);
}

/**
 * Indexes 0003 made in the builds before it was edited (see 0003-stage-shapes.ts): a database
 * upgraded by one of them carries its index, not today's, and must still end with one schema.
 */
const HISTORICAL_0003: Record<string, string> = {
  afdf4e3: `create index stages_ready_shape on stages (shape, priority desc, ready_since) where state = 'ready'`,
  dc8891f: `create index stages_state_shape on stages (state, shape, priority desc, ready_since)`,
};

/**
 * Runs every migration one at a time, as a database upgraded release by release did; `as0003At`
 * swaps in an older build's 0003 index. Each runs as kysely's Migrator runs it (on PostgreSQL in
 * a transaction of its own, on SQLite not), but not through the Migrator: on PostgreSQL it reads
 * every schema's tables before each run (introspection), which fails when a test in parallel drops
 * its schema meanwhile, and eighteen runs made that race likely. The fresh database goes through
 * the Migrator, as the store does.
 */
async function upgradeStepByStep(db: Kysely<any>, caps: StoreCapabilities, as0003At?: string): Promise<void> {
  const all = migrations(caps);
  for (const name of Object.keys(all).sort()) {
    const m = all[name]!;
    try {
      if (caps.dialect === 'postgres') await db.transaction().execute((trx) => m.up(trx));
      else await m.up(db);
    } catch (err) {
      throw new Error(`${name}: ${String(err)}`, { cause: err });
    }
    if (name === EARLY_STEP) await insertEarlyRows(db);
    if (name === '0019_containment') await insertUnscopedKeys(db);
    if (name === '0003_stage_shapes' && as0003At) {
      await sql`drop index stages_state_shape`.execute(db);
      await sql.raw(HISTORICAL_0003[as0003At]!).execute(db);
    }
  }
}

async function migrateFresh(db: Kysely<any>, caps: StoreCapabilities, schema?: string): Promise<void> {
  const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations(caps) }, ...(schema ? { migrationTableSchema: schema } : {}) });
  const r = await migrator.migrateToLatest();
  expect(r.error, String(r.error)).toBeUndefined();
}

describe('migrations are frozen', () => {
  it('import nothing but kysely and node built-ins', () => {
    const builtins = new Set(builtinModules);
    const files = readdirSync(migrationDir).filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'));
    expect(files.length).toBeGreaterThan(0);
    const wrong: string[] = [];
    for (const f of files) {
      const text = readFileSync(join(migrationDir, f), 'utf8');
      // Static imports and re-exports (type-only too) and dynamic imports.
      for (const m of text.matchAll(/(?:\bfrom\s*|\bimport\s*\(?\s*)['"]([^'"]+)['"]/g)) {
        const spec = m[1]!;
        const ok = spec === 'kysely' || spec.startsWith('node:') || builtins.has(spec);
        if (!ok) wrong.push(`${f} imports ${spec}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('every migration of the list has a file named after it', () => {
    const files = readdirSync(migrationDir)
      .filter((f) => /^\d{4}-.*\.ts$/.test(f) && !f.endsWith('.test.ts'))
      .map((f) => f.replace(/\.ts$/, '').replaceAll('-', '_'));
    expect(Object.keys(migrations(SQLITE)).sort()).toEqual(files.sort());
  });
});

describe('the latest schema holds the domain to its lists', () => {
  // The migrations copy their lists as literals, so nothing ties them to the domain's any more
  // but this: a state added or dropped in src/domain/ fails here until a new migration moves the
  // column's check constraint (and the snapshot is rewritten).
  const snapshot = readFileSync(join(snapshotDir, 'sqlite.txt'), 'utf8');
  it.each([
    ['jobs', 'state', jobStates],
    ['stages', 'state', stageStates],
    ['attempts', 'state', attemptStates],
    ['machines', 'health', machineHealths],
    ['machines', 'scheduling', machineSchedulings],
    ['tokens', 'kind', tokenKinds],
    ['autoscaled_machines', 'lifecycle', machineLifecycles],
  ] as const)("%s.%s admits exactly the domain's values", (table, column, values) => {
    const create = snapshot.split('\n').find((l) => l.startsWith(`table ${table} on ${table}: `));
    const check = create?.match(new RegExp(`check\\("${column}" in\\(([^)]*)\\)\\)`));
    expect(check, `no check on ${table}.${column} in the snapshot`).toBeTruthy();
    const admitted = check![1]!.split(',').map((v) => v.replace(/^'|'$/g, ''));
    expect([...admitted].sort()).toEqual([...values].sort());
  });
});

/** One database of a dialect: its Kysely, its schema as text, and its end. */
interface Opened {
  db: Kysely<any>;
  schema?: string;
  dump(): Promise<string>;
  close(): Promise<void>;
}

function sqliteDatabase(): Opened {
  const sqlite = new SQLite(':memory:');
  // As the store opens it: 0018's rebuild of machines must work with references enforced.
  sqlite.pragma('foreign_keys = ON');
  const db = new Kysely<any>({ dialect: new SqliteDialect({ database: sqlite }) });
  return {
    db,
    dump: async () => {
      // 0018 turns foreign keys off for its rebuild; they must be back on after it.
      expect(sqlite.pragma('foreign_keys', { simple: true })).toBe(1);
      return sqliteSchema(sqlite);
    },
    close: () => db.destroy(),
  };
}

/**
 * This file's own PostgreSQL database, made on first use and dropped after its tests. Not a schema
 * in the shared one: kysely's Migrator reads every table of its database (introspection) before it
 * runs, and fails when another test file drops its schema meanwhile; a database apart keeps this
 * file's DDL out of the others' catalog reads, and theirs out of this one's. Where the role may not
 * create databases, the shared one serves.
 */
let ownDatabase: { url: string; drop: () => Promise<void> } | null = null;
async function postgresUrl(): Promise<string> {
  if (ownDatabase) return ownDatabase.url;
  const name = freshSchema('gantry_migrations');
  const admin = new pg.Client({ connectionString: POSTGRES_URL });
  await admin.connect();
  try {
    await admin.query(`create database ${name}`);
  } catch (err) {
    if ((err as { code?: string }).code !== '42501') throw err;
    ownDatabase = { url: POSTGRES_URL, drop: async () => {} };
    return POSTGRES_URL;
  } finally {
    await admin.end();
  }
  const url = new URL(POSTGRES_URL);
  url.pathname = `/${name}`;
  ownDatabase = {
    url: url.toString(),
    drop: async () => {
      const c = new pg.Client({ connectionString: POSTGRES_URL });
      await c.connect();
      await c.query(`drop database if exists ${name} with (force)`).finally(() => c.end());
    },
  };
  return ownDatabase.url;
}
afterAll(async () => {
  await ownDatabase?.drop();
});

async function postgresDatabase(): Promise<Opened> {
  const url = await postgresUrl();
  const schema = freshSchema('mig');
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query(`create schema ${schema}`);
  const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 1, options: `-c search_path=${schema}` }) }) });
  return {
    db,
    schema,
    dump: () => postgresSchema(admin, schema),
    close: async () => {
      await db.destroy();
      await admin.query(`drop schema if exists ${schema} cascade`);
      await admin.end();
    },
  };
}

const missing = await serviceMissing('PostgreSQL', POSTGRES_URL);

for (const [dialect, caps, open] of [
  ['sqlite', SQLITE, async () => sqliteDatabase()],
  ['postgres', POSTGRES, postgresDatabase],
] as const) {
  describe(`migrations: one schema however a database got there (${dialect})`, () => {
    if (dialect === 'postgres' && missing) {
      it.skip(missing, () => {});
      return;
    }

    it('fresh equals upgraded step by step from 0001 with rows, and the snapshot', async () => {
      const fresh = await open();
      const upgraded = await open();
      try {
        await migrateFresh(fresh.db, caps, fresh.schema);
        await upgradeStepByStep(upgraded.db, caps);
        await expectEarlyRowsKept(upgraded.db);
        await expectKeysScoped(upgraded.db);
        const schema = await fresh.dump();
        expect(await upgraded.dump()).toBe(schema);
        checkSnapshot(dialect, schema);
      } finally {
        await fresh.close();
        await upgraded.close();
      }
    });

    it.each(Object.keys(HISTORICAL_0003))('a database whose 0003 ran at %s ends at the snapshot too', async (build) => {
      const upgraded = await open();
      try {
        await upgradeStepByStep(upgraded.db, caps, build);
        await expectEarlyRowsKept(upgraded.db);
        if (process.env.GANTRY_UPDATE_SCHEMA_SNAPSHOT !== '1') expect(await upgraded.dump()).toBe(readFileSync(join(snapshotDir, `${dialect}.txt`), 'utf8'));
      } finally {
        await upgraded.close();
      }
    });
  });
}
